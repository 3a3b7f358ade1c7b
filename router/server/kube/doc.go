// Package kube is Kubernetes service discovery for the live router (serve
// --service-discovery), with sgl-router's flags and meanings: pods matching a role's label
// selector become workers while they are Running, Ready and have an IP, at
// http://POD_IP:--service-discovery-port; a prefill pod's bootstrap port comes from the
// --bootstrap-port-annotation annotation. Pods are watched with client-go shared informers
// (list + watch + periodic resync), never a hand-rolled loop.
//
// Workers are added and removed through a small [Registry] declared here — serve passes its
// *server.Server, so they take the same registration path POST /workers does — and this
// package never imports router/server: the HTTP router does not link client-go, and
// discovery does not reach into the router's handlers.
package kube
