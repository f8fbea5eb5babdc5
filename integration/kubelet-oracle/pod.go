package main

// pod.go: a pod manifest → the v1.Pod the kubelet receives, through the API server's create path
// for pods (decode, defaulting, conversion to the internal type, rest.BeforeCreate with the pod
// registry's strategy: PrepareForCreate and validation), stored and read back as v1.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	api "k8s.io/kubernetes/pkg/apis/core"
	corev1 "k8s.io/kubernetes/pkg/apis/core/v1"
	podregistry "k8s.io/kubernetes/pkg/registry/core/pod"

	_ "k8s.io/kubernetes/pkg/apis/core/install"
)

// podCodecs decode strictly, as the API server does for kubectl's default field validation.
var podCodecs = serializer.NewCodecFactory(legacyscheme.Scheme, serializer.EnableStrict)

var podGVK = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}

// creationTime stands in for the API server's clock: answers must not depend on the time.
var creationTime = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

// createPod returns the pod as the kubelet gets it from the API server, or the API server's
// error (the text kubectl prints after "Error from server") when it refuses the pod. The pod's
// namespace defaults to "default"; uid is used when the manifest has none (the API server
// assigns a random one; the oracle's must be stable).
func createPod(ctx context.Context, manifest []byte, uid types.UID) (*v1.Pod, error) {
	obj, _, err := podCodecs.UniversalDeserializer().Decode(manifest, &podGVK, &v1.Pod{})
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	in, ok := obj.(*v1.Pod)
	if !ok {
		return nil, apierrors.NewBadRequest("the manifest is not a Pod")
	}
	if in.Namespace == "" {
		in.Namespace = metav1.NamespaceDefault
	}
	if in.UID == "" {
		in.UID = uid
	}
	in.CreationTimestamp = creationTime
	corev1.SetObjectDefaults_Pod(in)

	internal := &api.Pod{}
	if err := legacyscheme.Scheme.Convert(in, internal, nil); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	reqCtx := genericapirequest.WithNamespace(genericapirequest.WithRequestInfo(ctx, &genericapirequest.RequestInfo{
		IsResourceRequest: true, Verb: "create", APIVersion: "v1", Namespace: in.Namespace, Resource: "pods", Name: in.Name,
	}), in.Namespace)
	if err := rest.BeforeCreate(podregistry.Strategy, reqCtx, internal); err != nil {
		return nil, sortedCauses(err)
	}

	out := &v1.Pod{}
	if err := legacyscheme.Scheme.Convert(internal, out, nil); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	// Read back from storage (and by the kubelet) through the defaulting decoder.
	corev1.SetObjectDefaults_Pod(out)
	return out, nil
}

// sortedCauses returns an Invalid error with its causes sorted (and deduplicated, as the API
// server's message is): the API server lists some of them in map order (pod-level resources), so
// its message would change from run to run.
func sortedCauses(err error) error {
	var se *apierrors.StatusError
	if !errors.As(err, &se) || se.ErrStatus.Reason != metav1.StatusReasonInvalid || se.ErrStatus.Details == nil || len(se.ErrStatus.Details.Causes) < 2 {
		return err
	}
	d := se.ErrStatus.Details
	var msgs []string
	for _, c := range d.Causes {
		msgs = append(msgs, c.Field+": "+c.Message)
	}
	slices.Sort(msgs)
	msgs = slices.Compact(msgs)
	list := msgs[0]
	if len(msgs) > 1 {
		list = "[" + strings.Join(msgs, ", ") + "]"
	}
	return fmt.Errorf("%s %q is invalid: %s", schema.GroupKind{Group: d.Group, Kind: d.Kind}.String(), d.Name, list)
}
