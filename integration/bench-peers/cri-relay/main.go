// cri-relay is a typed CRI relay, built the way CRI Resource Manager and cri-lite relay the calls
// they do not rewrite: it serves RuntimeService and ImageService with the generated
// k8s.io/cri-api types, and each method decodes the request, calls the same method of the
// runtime's generated client (one shared grpc-go connection) and re-encodes the answer. Errors
// pass through as the runtime's gRPC status. A peer for integration/bench-relay.sh, not part of
// numa-shim.
//
// Usage: cri-relay -listen /run/x/relay.sock -runtime /run/x/containerd.sock
package main

import (
	"context"
	"flag"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	rt "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// grpc-go's and the kubelet's message size limit for CRI.
const maxMsgSize = 16 << 20

type relay struct {
	rt.UnimplementedRuntimeServiceServer
	rt.UnimplementedImageServiceServer
	runtime rt.RuntimeServiceClient
	image   rt.ImageServiceClient
}

// stream relays one server-streaming call: open it on the runtime, copy every message back.
func stream[Req, Resp any](ctx context.Context, req *Req, srv grpc.ServerStreamingServer[Resp],
	open func(context.Context, *Req, ...grpc.CallOption) (grpc.ServerStreamingClient[Resp], error)) error {
	in, err := open(ctx, req)
	if err != nil {
		return err
	}
	for {
		msg, err := in.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := srv.Send(msg); err != nil {
			return err
		}
	}
}

func (r *relay) Version(ctx context.Context, req *rt.VersionRequest) (*rt.VersionResponse, error) {
	return r.runtime.Version(ctx, req)
}
func (r *relay) RunPodSandbox(ctx context.Context, req *rt.RunPodSandboxRequest) (*rt.RunPodSandboxResponse, error) {
	return r.runtime.RunPodSandbox(ctx, req)
}
func (r *relay) StopPodSandbox(ctx context.Context, req *rt.StopPodSandboxRequest) (*rt.StopPodSandboxResponse, error) {
	return r.runtime.StopPodSandbox(ctx, req)
}
func (r *relay) RemovePodSandbox(ctx context.Context, req *rt.RemovePodSandboxRequest) (*rt.RemovePodSandboxResponse, error) {
	return r.runtime.RemovePodSandbox(ctx, req)
}
func (r *relay) PodSandboxStatus(ctx context.Context, req *rt.PodSandboxStatusRequest) (*rt.PodSandboxStatusResponse, error) {
	return r.runtime.PodSandboxStatus(ctx, req)
}
func (r *relay) ListPodSandbox(ctx context.Context, req *rt.ListPodSandboxRequest) (*rt.ListPodSandboxResponse, error) {
	return r.runtime.ListPodSandbox(ctx, req)
}
func (r *relay) StreamPodSandboxes(req *rt.StreamPodSandboxesRequest, srv grpc.ServerStreamingServer[rt.StreamPodSandboxesResponse]) error {
	return stream(srv.Context(), req, srv, r.runtime.StreamPodSandboxes)
}
func (r *relay) CreateContainer(ctx context.Context, req *rt.CreateContainerRequest) (*rt.CreateContainerResponse, error) {
	return r.runtime.CreateContainer(ctx, req)
}
func (r *relay) StartContainer(ctx context.Context, req *rt.StartContainerRequest) (*rt.StartContainerResponse, error) {
	return r.runtime.StartContainer(ctx, req)
}
func (r *relay) StopContainer(ctx context.Context, req *rt.StopContainerRequest) (*rt.StopContainerResponse, error) {
	return r.runtime.StopContainer(ctx, req)
}
func (r *relay) RemoveContainer(ctx context.Context, req *rt.RemoveContainerRequest) (*rt.RemoveContainerResponse, error) {
	return r.runtime.RemoveContainer(ctx, req)
}
func (r *relay) ListContainers(ctx context.Context, req *rt.ListContainersRequest) (*rt.ListContainersResponse, error) {
	return r.runtime.ListContainers(ctx, req)
}
func (r *relay) StreamContainers(req *rt.StreamContainersRequest, srv grpc.ServerStreamingServer[rt.StreamContainersResponse]) error {
	return stream(srv.Context(), req, srv, r.runtime.StreamContainers)
}
func (r *relay) ContainerStatus(ctx context.Context, req *rt.ContainerStatusRequest) (*rt.ContainerStatusResponse, error) {
	return r.runtime.ContainerStatus(ctx, req)
}
func (r *relay) UpdateContainerResources(ctx context.Context, req *rt.UpdateContainerResourcesRequest) (*rt.UpdateContainerResourcesResponse, error) {
	return r.runtime.UpdateContainerResources(ctx, req)
}
func (r *relay) ReopenContainerLog(ctx context.Context, req *rt.ReopenContainerLogRequest) (*rt.ReopenContainerLogResponse, error) {
	return r.runtime.ReopenContainerLog(ctx, req)
}
func (r *relay) ExecSync(ctx context.Context, req *rt.ExecSyncRequest) (*rt.ExecSyncResponse, error) {
	return r.runtime.ExecSync(ctx, req)
}
func (r *relay) Exec(ctx context.Context, req *rt.ExecRequest) (*rt.ExecResponse, error) {
	return r.runtime.Exec(ctx, req)
}
func (r *relay) Attach(ctx context.Context, req *rt.AttachRequest) (*rt.AttachResponse, error) {
	return r.runtime.Attach(ctx, req)
}
func (r *relay) PortForward(ctx context.Context, req *rt.PortForwardRequest) (*rt.PortForwardResponse, error) {
	return r.runtime.PortForward(ctx, req)
}
func (r *relay) ContainerStats(ctx context.Context, req *rt.ContainerStatsRequest) (*rt.ContainerStatsResponse, error) {
	return r.runtime.ContainerStats(ctx, req)
}
func (r *relay) ListContainerStats(ctx context.Context, req *rt.ListContainerStatsRequest) (*rt.ListContainerStatsResponse, error) {
	return r.runtime.ListContainerStats(ctx, req)
}
func (r *relay) StreamContainerStats(req *rt.StreamContainerStatsRequest, srv grpc.ServerStreamingServer[rt.StreamContainerStatsResponse]) error {
	return stream(srv.Context(), req, srv, r.runtime.StreamContainerStats)
}
func (r *relay) PodSandboxStats(ctx context.Context, req *rt.PodSandboxStatsRequest) (*rt.PodSandboxStatsResponse, error) {
	return r.runtime.PodSandboxStats(ctx, req)
}
func (r *relay) ListPodSandboxStats(ctx context.Context, req *rt.ListPodSandboxStatsRequest) (*rt.ListPodSandboxStatsResponse, error) {
	return r.runtime.ListPodSandboxStats(ctx, req)
}
func (r *relay) StreamPodSandboxStats(req *rt.StreamPodSandboxStatsRequest, srv grpc.ServerStreamingServer[rt.StreamPodSandboxStatsResponse]) error {
	return stream(srv.Context(), req, srv, r.runtime.StreamPodSandboxStats)
}
func (r *relay) UpdateRuntimeConfig(ctx context.Context, req *rt.UpdateRuntimeConfigRequest) (*rt.UpdateRuntimeConfigResponse, error) {
	return r.runtime.UpdateRuntimeConfig(ctx, req)
}
func (r *relay) Status(ctx context.Context, req *rt.StatusRequest) (*rt.StatusResponse, error) {
	return r.runtime.Status(ctx, req)
}
func (r *relay) CheckpointContainer(ctx context.Context, req *rt.CheckpointContainerRequest) (*rt.CheckpointContainerResponse, error) {
	return r.runtime.CheckpointContainer(ctx, req)
}
func (r *relay) CheckpointPod(ctx context.Context, req *rt.CheckpointPodRequest) (*rt.CheckpointPodResponse, error) {
	return r.runtime.CheckpointPod(ctx, req)
}
func (r *relay) RestorePod(ctx context.Context, req *rt.RestorePodRequest) (*rt.RestorePodResponse, error) {
	return r.runtime.RestorePod(ctx, req)
}
func (r *relay) GetContainerEvents(req *rt.GetEventsRequest, srv grpc.ServerStreamingServer[rt.ContainerEventResponse]) error {
	return stream(srv.Context(), req, srv, r.runtime.GetContainerEvents)
}
func (r *relay) ListMetricDescriptors(ctx context.Context, req *rt.ListMetricDescriptorsRequest) (*rt.ListMetricDescriptorsResponse, error) {
	return r.runtime.ListMetricDescriptors(ctx, req)
}
func (r *relay) ListPodSandboxMetrics(ctx context.Context, req *rt.ListPodSandboxMetricsRequest) (*rt.ListPodSandboxMetricsResponse, error) {
	return r.runtime.ListPodSandboxMetrics(ctx, req)
}
func (r *relay) StreamPodSandboxMetrics(req *rt.StreamPodSandboxMetricsRequest, srv grpc.ServerStreamingServer[rt.StreamPodSandboxMetricsResponse]) error {
	return stream(srv.Context(), req, srv, r.runtime.StreamPodSandboxMetrics)
}
func (r *relay) RuntimeConfig(ctx context.Context, req *rt.RuntimeConfigRequest) (*rt.RuntimeConfigResponse, error) {
	return r.runtime.RuntimeConfig(ctx, req)
}
func (r *relay) UpdatePodSandboxResources(ctx context.Context, req *rt.UpdatePodSandboxResourcesRequest) (*rt.UpdatePodSandboxResourcesResponse, error) {
	return r.runtime.UpdatePodSandboxResources(ctx, req)
}

func (r *relay) ListImages(ctx context.Context, req *rt.ListImagesRequest) (*rt.ListImagesResponse, error) {
	return r.image.ListImages(ctx, req)
}
func (r *relay) StreamImages(req *rt.StreamImagesRequest, srv grpc.ServerStreamingServer[rt.StreamImagesResponse]) error {
	return stream(srv.Context(), req, srv, r.image.StreamImages)
}
func (r *relay) ImageStatus(ctx context.Context, req *rt.ImageStatusRequest) (*rt.ImageStatusResponse, error) {
	return r.image.ImageStatus(ctx, req)
}
func (r *relay) PullImage(ctx context.Context, req *rt.PullImageRequest) (*rt.PullImageResponse, error) {
	return r.image.PullImage(ctx, req)
}
func (r *relay) RemoveImage(ctx context.Context, req *rt.RemoveImageRequest) (*rt.RemoveImageResponse, error) {
	return r.image.RemoveImage(ctx, req)
}
func (r *relay) ImageFsInfo(ctx context.Context, req *rt.ImageFsInfoRequest) (*rt.ImageFsInfoResponse, error) {
	return r.image.ImageFsInfo(ctx, req)
}

func main() {
	listen := flag.String("listen", "", "unix socket to serve on")
	runtime := flag.String("runtime", "", "the runtime's unix socket")
	flag.Parse()
	if *listen == "" || *runtime == "" {
		log.Fatal("usage: cri-relay -listen SOCKET -runtime SOCKET")
	}
	conn, err := grpc.NewClient("passthrough:///"+*runtime,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize)))
	if err != nil {
		log.Fatalf("runtime %s: %v", *runtime, err)
	}
	_ = os.Remove(*listen)
	lis, err := net.Listen("unix", *listen)
	if err != nil {
		log.Fatalf("listen %s: %v", *listen, err)
	}
	r := &relay{runtime: rt.NewRuntimeServiceClient(conn), image: rt.NewImageServiceClient(conn)}
	server := grpc.NewServer(grpc.MaxRecvMsgSize(maxMsgSize))
	rt.RegisterRuntimeServiceServer(server, r)
	rt.RegisterImageServiceServer(server, r)
	// Writes to a client that went away fail with EPIPE instead of raising SIGPIPE (as most
	// daemons set it; it also keeps callgrind 3.19 from tripping over Go's signal handler).
	signal.Ignore(syscall.SIGPIPE)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		server.Stop()
	}()
	log.Printf("cri-relay on %s -> %s", *listen, *runtime)
	if err := server.Serve(lis); err != nil {
		log.Fatal(err)
	}
}
