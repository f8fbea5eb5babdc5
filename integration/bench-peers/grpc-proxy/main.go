// grpc-proxy is a transparent gRPC proxy for the CRI, built the way koordinator's runtime proxy
// and mwitkow/grpc-proxy forward calls they do not handle: one grpc-go server whose
// unknown-service handler takes every method, a codec that keeps each message as raw bytes (no
// protobuf decoding), and one shared grpc-go client connection to the runtime. Metadata, headers,
// trailers and status pass through. A peer for integration/bench-relay.sh, not part of numa-shim.
//
// Usage: grpc-proxy -listen /run/x/proxy.sock -runtime /run/x/containerd.sock
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// frame is one gRPC message, kept as the bytes that came off the wire.
type frame struct{ payload []byte }

// rawCodec moves frames without decoding them. Its name is "proto" so that the content type the
// runtime sees stays application/grpc+proto.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	f, ok := v.(*frame)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	return f.payload, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	f, ok := v.(*frame)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	// grpc-go's bridge for v1 codecs hands over a fresh slice (mem.BufferSlice.Materialize),
	// so it can be kept as it is, without another copy.
	f.payload = data
	return nil
}

func (rawCodec) Name() string { return "proto" }

// bothWays is the descriptor of the upstream stream: every method is treated as bidirectional,
// which covers unary and streaming calls alike.
var bothWays = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

type proxy struct{ runtime *grpc.ClientConn }

// forward relays one call of any method to the runtime.
func (p *proxy) forward(_ any, in grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(in)
	if !ok {
		return errors.New("no method in stream")
	}
	ctx, cancel := context.WithCancel(in.Context())
	defer cancel()
	md, _ := metadata.FromIncomingContext(ctx)
	ctx = metadata.NewOutgoingContext(ctx, md.Copy())
	out, err := p.runtime.NewStream(ctx, bothWays, method, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return err
	}
	sent := make(chan error, 1)
	go func() { sent <- clientToRuntime(in, out) }()
	received := runtimeToClient(out, in)
	in.SetTrailer(out.Trailer())
	if received != nil {
		// The runtime's status (or a broken client): the call is over either way.
		return received
	}
	return <-sent
}

// clientToRuntime copies the client's messages to the runtime and half-closes at the end.
func clientToRuntime(in grpc.ServerStream, out grpc.ClientStream) error {
	for {
		f := &frame{}
		if err := in.RecvMsg(f); err != nil {
			if err == io.EOF {
				return out.CloseSend()
			}
			return err
		}
		if err := out.SendMsg(f); err != nil {
			return err
		}
	}
}

// runtimeToClient copies the runtime's headers and messages back; nil at the runtime's clean end,
// else the runtime's status as it was sent.
func runtimeToClient(out grpc.ClientStream, in grpc.ServerStream) error {
	for first := true; ; first = false {
		f := &frame{}
		err := out.RecvMsg(f)
		if first {
			// Headers are known once the first message (or the end) has arrived.
			if md, herr := out.Header(); herr == nil {
				if serr := in.SendHeader(md); serr != nil && err == nil {
					return serr
				}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := in.SendMsg(f); err != nil {
			return err
		}
	}
}

func main() {
	listen := flag.String("listen", "", "unix socket to serve on")
	runtime := flag.String("runtime", "", "the runtime's unix socket")
	flag.Parse()
	if *listen == "" || *runtime == "" {
		log.Fatal("usage: grpc-proxy -listen SOCKET -runtime SOCKET")
	}
	conn, err := grpc.NewClient("passthrough:///"+*runtime,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}))
	if err != nil {
		log.Fatalf("runtime %s: %v", *runtime, err)
	}
	_ = os.Remove(*listen)
	lis, err := net.Listen("unix", *listen)
	if err != nil {
		log.Fatalf("listen %s: %v", *listen, err)
	}
	p := &proxy{runtime: conn}
	server := grpc.NewServer(
		grpc.ForceServerCodec(rawCodec{}),
		grpc.UnknownServiceHandler(p.forward),
		grpc.MaxRecvMsgSize(16<<20),
	)
	// Writes to a client that went away fail with EPIPE instead of raising SIGPIPE (as most
	// daemons set it; it also keeps callgrind 3.19 from tripping over Go's signal handler).
	signal.Ignore(syscall.SIGPIPE)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		server.Stop()
	}()
	log.Printf("grpc-proxy on %s -> %s", *listen, *runtime)
	if err := server.Serve(lis); err != nil {
		log.Fatal(err)
	}
}
