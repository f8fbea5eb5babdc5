package numashim;

import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.Descriptors.MethodDescriptor;
import com.google.protobuf.Descriptors.ServiceDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.util.JsonFormat;
import io.grpc.CallOptions;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.ProtoUtils;
import io.grpc.stub.ClientCalls;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * One call to a CRI or PodResources server on a unix socket with grpc-java's default channel
 * ({@code Grpc.newChannelBuilder("unix:///path", insecure)}: Netty with epoll), printing JSON:
 *
 * <pre>
 *   Client SOCKET call SERVICE METHOD JSON       {"code": "OK", "message": "", "response": {...}}
 *   Client SOCKET stream SERVICE METHOD JSON N  {"code": "OK", ..., "responses": [...]}
 * </pre>
 *
 * SERVICE is runtime.v1.RuntimeService, runtime.v1.ImageService or v1.PodResourcesLister.
 * A stream is read until it ends or N messages arrived, then cancelled.
 */
public final class Client {
  private Client() {}

  public static void main(String[] args) throws Exception {
    if (args.length < 5) {
      System.err.println("usage: Client SOCKET call|stream SERVICE METHOD JSON [N]");
      System.exit(64);
    }
    String socket = args[0];
    String mode = args[1];
    MethodDescriptor method = find(args[2], args[3]);
    DynamicMessage.Builder request = DynamicMessage.newBuilder(method.getInputType());
    JsonFormat.parser().merge(args[4], request);
    int want = args.length > 5 ? Integer.parseInt(args[5]) : Integer.MAX_VALUE;

    ManagedChannel channel =
        Grpc.newChannelBuilder("unix://" + socket, InsecureChannelCredentials.create()).build();
    StringBuilder out = new StringBuilder();
    try {
      io.grpc.MethodDescriptor<DynamicMessage, DynamicMessage> grpcMethod =
          io.grpc.MethodDescriptor.<DynamicMessage, DynamicMessage>newBuilder()
              .setType(
                  mode.equals("stream")
                      ? io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING
                      : io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(
                  io.grpc.MethodDescriptor.generateFullMethodName(args[2], args[3]))
              .setRequestMarshaller(
                  ProtoUtils.marshaller(DynamicMessage.getDefaultInstance(method.getInputType())))
              .setResponseMarshaller(
                  ProtoUtils.marshaller(DynamicMessage.getDefaultInstance(method.getOutputType())))
              .build();
      CallOptions options = CallOptions.DEFAULT.withDeadlineAfter(20, TimeUnit.SECONDS);
      List<String> responses = new ArrayList<>();
      Status status = Status.OK;
      try {
        if (mode.equals("stream")) {
          io.grpc.ClientCall<DynamicMessage, DynamicMessage> call =
              channel.newCall(grpcMethod, options);
          Iterator<DynamicMessage> it = ClientCalls.blockingServerStreamingCall(call, request.build());
          while (responses.size() < want && it.hasNext()) {
            responses.add(JsonFormat.printer().omittingInsignificantWhitespace().print(it.next()));
          }
          call.cancel("read enough", null);
        } else {
          DynamicMessage response =
              ClientCalls.blockingUnaryCall(channel, grpcMethod, options, request.build());
          responses.add(JsonFormat.printer().omittingInsignificantWhitespace().print(response));
        }
      } catch (StatusRuntimeException e) {
        status = e.getStatus();
      }
      out.append("{\"code\": ").append(quote(status.getCode().name()));
      out.append(", \"message\": ").append(quote(status.getDescription() == null ? "" : status.getDescription()));
      if (mode.equals("stream")) {
        out.append(", \"responses\": [").append(String.join(", ", responses)).append("]");
      } else if (!responses.isEmpty()) {
        out.append(", \"response\": ").append(responses.get(0));
      }
      out.append("}");
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
    System.out.println(out);
  }

  private static MethodDescriptor find(String service, String method) {
    FileDescriptor[] files = {runtime.v1.Api.getDescriptor(), v1.Api.getDescriptor()};
    for (FileDescriptor file : files) {
      for (ServiceDescriptor s : file.getServices()) {
        if (s.getFullName().equals(service) && s.findMethodByName(method) != null) {
          return s.findMethodByName(method);
        }
      }
    }
    throw new IllegalArgumentException("no method " + service + "/" + method);
  }

  private static String quote(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      switch (c) {
        case '"' -> b.append("\\\"");
        case '\\' -> b.append("\\\\");
        case '\n' -> b.append("\\n");
        default -> {
          if (c < 0x20) {
            b.append(String.format("\\u%04x", (int) c));
          } else {
            b.append(c);
          }
        }
      }
    }
    return b.append('"').toString();
  }
}
