// podresources-go asks a PodResources v1 server (the kubelet's, or numa-shim's) over its unix
// socket with the client topology exporters and device monitors use: the generated gRPC client
// of k8s.io/kubelet/pkg/apis/podresources/v1. It prints the answer as JSON (protojson, proto
// field names) on stdout.
//
// Usage: podresources-go -socket PATH list | get NAME NAMESPACE | allocatable
//
// Exit status: 0 answered, 2 the server answered an error (printed as {"code", "message"}),
// 1 usage or connection set-up.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

func main() {
	socket := flag.String("socket", "/var/lib/kubelet/pod-resources/kubelet.sock", "PodResources socket")
	timeout := flag.Duration("timeout", 10*time.Second, "deadline of the call")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: podresources-go -socket PATH list | get NAME NAMESPACE | allocatable")
		os.Exit(1)
	}
	conn, err := grpc.NewClient("unix://"+*socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer conn.Close()
	client := podresourcesv1.NewPodResourcesListerClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	var answer proto.Message
	switch {
	case args[0] == "list" && len(args) == 1:
		answer, err = client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	case args[0] == "get" && len(args) == 3:
		answer, err = client.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodName: args[1], PodNamespace: args[2]})
	case args[0] == "allocatable" && len(args) == 1:
		answer, err = client.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	default:
		fmt.Fprintf(os.Stderr, "unknown call %q\n", args)
		os.Exit(1)
	}
	if err != nil {
		s := status.Convert(err)
		out, _ := json.Marshal(map[string]string{"code": s.Code().String(), "message": s.Message()})
		fmt.Println(string(out))
		os.Exit(2)
	}
	out, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(answer)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}
