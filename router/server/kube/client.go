package kube

import (
	"context"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// podClient lists and watches pods in a namespace ("" = all). The REST implementation below
// knows only core/v1: client-go's typed clientset would link every API group's types (the
// binary grew from 32 to 88 MB with it).
type podClient interface {
	List(ctx context.Context, namespace string, o metav1.ListOptions) (*corev1.PodList, error)
	Watch(ctx context.Context, namespace string, o metav1.ListOptions) (watch.Interface, error)
}

// restPods is podClient over a core/v1 REST client.
type restPods struct {
	rc     *rest.RESTClient
	params runtime.ParameterCodec
}

func (c restPods) List(ctx context.Context, ns string, o metav1.ListOptions) (*corev1.PodList, error) {
	var out corev1.PodList
	err := c.rc.Get().Namespace(ns).Resource("pods").VersionedParams(&o, c.params).Do(ctx).Into(&out)
	return &out, err
}

func (c restPods) Watch(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
	o.Watch = true
	return c.rc.Get().Namespace(ns).Resource("pods").VersionedParams(&o, c.params).Watch(ctx)
}

// kubeClient builds a client from --kubeconfig, else $KUBECONFIG or ~/.kube/config, else the
// in-cluster service account; it also returns the namespace that configuration names (the
// router pod's own in a cluster).
func kubeClient(kubeconfig string) (podClient, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	conf, err := cc.ClientConfig()
	if err != nil {
		if kubeconfig != "" {
			return nil, "", fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
		}
		if conf, err = rest.InClusterConfig(); err != nil {
			return nil, "", fmt.Errorf("--service-discovery: no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not in a cluster: %w", err)
		}
	}
	ns, _, err := cc.Namespace()
	if err != nil || ns == "" {
		ns = "default"
		if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
			ns = strings.TrimSpace(string(b))
		}
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, "", err
	}
	rc := rest.CopyConfig(conf)
	rc.GroupVersion, rc.APIPath = &corev1.SchemeGroupVersion, "/api"
	rc.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if rc.UserAgent == "" {
		rc.UserAgent = "pdrouter"
	}
	client, err := rest.RESTClientFor(rc)
	if err != nil {
		return nil, "", fmt.Errorf("--service-discovery: %w", err)
	}
	return restPods{rc: client, params: runtime.NewParameterCodec(scheme)}, ns, nil
}

// discoveryNamespace resolves --service-discovery-namespace: as given; else every namespace
// when the router may list pods cluster-wide; else its own (a namespaced Role, the least
// privilege the manifests in deploy/k8s grant).
func discoveryNamespace(ctx context.Context, client podClient, given, own string) (string, error) {
	if given != "" {
		return given, nil
	}
	lctx, cancel := context.WithTimeout(ctx, discoverySyncTimeout)
	defer cancel()
	_, err := client.List(lctx, "", metav1.ListOptions{Limit: 1})
	switch {
	case err == nil:
		return "", nil
	case apierrors.IsForbidden(err):
		return own, nil
	default:
		return "", fmt.Errorf("--service-discovery: listing pods: %w", err)
	}
}
