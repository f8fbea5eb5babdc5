// cri-go-client makes one CRI call with grpc-go (the kubelet's and crictl's gRPC library, with
// its default dial options) and prints what grpc-go reports as JSON on stdout:
//
//	{"code": "NotFound", "message": "...", "response": {...}}
//
// Usage: cri-go-client -endpoint unix:///path [-timeout 10s] METHOD 'JSON REQUEST'
//
//	METHOD is a RuntimeService method (RunPodSandbox, CreateContainer, ...); the request is
//	protojson of its request message. GetContainerEvents reads -events messages and stops.
//
// The tests compare its output through numa-shim with its output straight at the runtime.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type pair struct{ req, resp proto.Message }

var unary = map[string]func() pair{
	"Version":                  func() pair { return pair{&runtime.VersionRequest{}, &runtime.VersionResponse{}} },
	"RunPodSandbox":            func() pair { return pair{&runtime.RunPodSandboxRequest{}, &runtime.RunPodSandboxResponse{}} },
	"StopPodSandbox":           func() pair { return pair{&runtime.StopPodSandboxRequest{}, &runtime.StopPodSandboxResponse{}} },
	"RemovePodSandbox":         func() pair { return pair{&runtime.RemovePodSandboxRequest{}, &runtime.RemovePodSandboxResponse{}} },
	"CreateContainer":          func() pair { return pair{&runtime.CreateContainerRequest{}, &runtime.CreateContainerResponse{}} },
	"StartContainer":           func() pair { return pair{&runtime.StartContainerRequest{}, &runtime.StartContainerResponse{}} },
	"StopContainer":            func() pair { return pair{&runtime.StopContainerRequest{}, &runtime.StopContainerResponse{}} },
	"RemoveContainer":          func() pair { return pair{&runtime.RemoveContainerRequest{}, &runtime.RemoveContainerResponse{}} },
	"UpdateContainerResources": func() pair { return pair{&runtime.UpdateContainerResourcesRequest{}, &runtime.UpdateContainerResourcesResponse{}} },
	"ContainerStatus":          func() pair { return pair{&runtime.ContainerStatusRequest{}, &runtime.ContainerStatusResponse{}} },
	"PodSandboxStatus":         func() pair { return pair{&runtime.PodSandboxStatusRequest{}, &runtime.PodSandboxStatusResponse{}} },
}

type result struct {
	Code     string            `json:"code"`
	Message  string            `json:"message"`
	Details  int               `json:"details"`
	Response json.RawMessage   `json:"response,omitempty"`
	Events   []json.RawMessage `json:"events,omitempty"`
}

func main() {
	endpoint := flag.String("endpoint", "", "unix:///path of the CRI socket")
	timeout := flag.Duration("timeout", 10*time.Second, "deadline of the call")
	events := flag.Int("events", 0, "GetContainerEvents: messages to read before hanging up")
	flag.Parse()
	if *endpoint == "" || flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: cri-go-client -endpoint unix:///path METHOD JSON")
		os.Exit(64)
	}
	method, body := flag.Arg(0), flag.Arg(1)
	conn, err := grpc.NewClient(*endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial:", err)
		os.Exit(65)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	out := result{}
	if method == "GetContainerEvents" {
		out = containerEvents(ctx, conn, *events)
	} else {
		newPair, ok := unary[method]
		if !ok {
			fmt.Fprintln(os.Stderr, "unknown method", method)
			os.Exit(64)
		}
		p := newPair()
		if err := protojson.Unmarshal([]byte(body), p.req); err != nil {
			fmt.Fprintln(os.Stderr, "request:", err)
			os.Exit(64)
		}
		err = conn.Invoke(ctx, "/runtime.v1.RuntimeService/"+method, p.req, p.resp)
		out = fromError(err)
		if err == nil {
			out.Response, _ = protojson.Marshal(p.resp)
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}

func fromError(err error) result {
	st := status.Convert(err)
	return result{Code: st.Code().String(), Message: st.Message(), Details: len(st.Details())}
}

func containerEvents(ctx context.Context, conn *grpc.ClientConn, want int) result {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := runtime.NewRuntimeServiceClient(conn).GetContainerEvents(ctx, &runtime.GetEventsRequest{})
	if err != nil {
		return fromError(err)
	}
	out := result{Code: "OK"}
	for len(out.Events) < want {
		ev, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			r := fromError(err)
			r.Events = out.Events
			return r
		}
		b, _ := protojson.Marshal(ev)
		out.Events = append(out.Events, b)
	}
	return out
}
