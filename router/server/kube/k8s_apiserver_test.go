//go:build k8s

package kube

// The opt-in Kubernetes test (make test-k8s): a real kube-apiserver and etcd, built from the
// Go module proxy by scripts/k8s-testenv.sh, on loopback. No scheduler or kubelet runs, so
// the test plays the kubelet's part: it writes each pod's status (Running, Ready, IP) itself.
// The workers are real fakeworkers on 127.0.0.2 and 127.0.0.3.

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/fakeworker"
	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/router/server"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// startProcess runs bin with args until the test ends, its output in dir/name.log.
func startProcess(t *testing.T, dir, name, bin string, args ...string) {
	t.Helper()
	log, err := os.Create(filepath.Join(dir, name+".log"))
	require.NoError(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start(), name)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s log tail:\n%s", name, b)
		}
	})
}

// testAPIServer starts etcd and kube-apiserver and returns an admin client and the address.
func testAPIServer(t *testing.T) (*kubernetes.Clientset, string) {
	bin := os.Getenv("PDROUTER_K8S_BIN")
	if bin == "" {
		t.Fatal("PDROUTER_K8S_BIN is not set: run make test-k8s, which builds kube-apiserver and etcd")
	}
	dir := t.TempDir()
	client, peer, api := testutil.FreePort(t, "127.0.0.1"), testutil.FreePort(t, "127.0.0.1"), testutil.FreePort(t, "127.0.0.1")
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", client)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	startProcess(t, dir, "etcd", filepath.Join(bin, "etcd"), "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL, "--initial-cluster", "default="+peerURL)

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	saKey := filepath.Join(dir, "sa.key")
	require.NoError(t, os.WriteFile(saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600))
	tokens := filepath.Join(dir, "tokens.csv")
	require.NoError(t, os.WriteFile(tokens, []byte("admintoken,admin,admin,system:masters\n"), 0o600))
	startProcess(t, dir, "kube-apiserver", filepath.Join(bin, "kube-apiserver"), "--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", strconv.Itoa(api),
		"--cert-dir", filepath.Join(dir, "certs"), "--token-auth-file", tokens, "--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc", "--service-account-key-file", saKey,
		"--service-account-signing-key-file", saKey, "--service-cluster-ip-range", "10.0.0.0/24")

	host := fmt.Sprintf("https://127.0.0.1:%d", api)
	conf := &rest.Config{Host: host, BearerToken: "admintoken", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	cs, err := kubernetes.NewForConfig(conf)
	require.NoError(t, err)
	// A real server takes seconds to start; bounded polling of /readyz is the only signal.
	require.Eventually(t, func() bool {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		return err == nil && string(body) == "ok"
	}, 120*time.Second, 200*time.Millisecond, "kube-apiserver never became ready")
	return cs, host
}

// applyBaseRBAC creates the ServiceAccount, Role and RoleBinding of deploy/k8s/base in ns
// and returns the ServiceAccount's name: the router then runs with exactly the privileges
// the manifests grant.
func applyBaseRBAC(t *testing.T, cs *kubernetes.Clientset, ns string) string {
	ctx := context.Background()
	files, err := filepath.Glob("../../../deploy/k8s/base/*.yaml")
	require.NoError(t, err)
	sa := ""
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			var meta metav1.TypeMeta
			require.NoError(t, yaml.Unmarshal([]byte(doc), &meta))
			switch meta.Kind {
			case "ServiceAccount":
				var o corev1.ServiceAccount
				require.NoError(t, yaml.Unmarshal([]byte(doc), &o))
				o.Namespace, sa = ns, o.Name
				_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &o, metav1.CreateOptions{})
			case "Role":
				var o rbacv1.Role
				require.NoError(t, yaml.Unmarshal([]byte(doc), &o))
				o.Namespace = ns
				_, err = cs.RbacV1().Roles(ns).Create(ctx, &o, metav1.CreateOptions{})
			case "RoleBinding":
				var o rbacv1.RoleBinding
				require.NoError(t, yaml.Unmarshal([]byte(doc), &o))
				o.Namespace = ns
				for i := range o.Subjects {
					o.Subjects[i].Namespace = ns
				}
				_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &o, metav1.CreateOptions{})
			default:
				continue
			}
			require.NoError(t, err, "%s: %s", f, meta.Kind)
		}
	}
	require.NotEmpty(t, sa, "deploy/k8s/base has no ServiceAccount")
	return sa
}

func TestK8sDiscoveryAgainstAPIServer(t *testing.T) {
	cs, host := testAPIServer(t)
	ctx := context.Background()
	const ns = "pd"
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	// No controller-manager runs, so the namespace's default ServiceAccount (which pod
	// admission looks up) is created by hand.
	_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	sa := applyBaseRBAC(t, cs, ns)
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authv1.TokenRequest{}, metav1.CreateOptions{})
	require.NoError(t, err)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: router, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: router, namespace: %s}}]
current-context: test
`, host, tok.Status.Token, ns)), 0o600))

	// Real fakeworkers, one per pod IP, on one port.
	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	var port int
	var prefill, decode *fakeworker.Worker
	for try := 0; try < 20 && decode == nil; try++ {
		port = testutil.FreePort(t, "127.0.0.2")
		prefill, err = fakeworker.Start(wctx, fakeworker.Config{Mode: engine.RolePrefill, Host: "127.0.0.2", Port: port})
		if err != nil {
			continue
		}
		decode, _ = fakeworker.Start(wctx, fakeworker.Config{Mode: engine.RoleDecode, Host: "127.0.0.3", Port: port}) // nil on a taken port: the loop tries another
	}
	require.NotNil(t, decode, "no port free on 127.0.0.2 and 127.0.0.3")

	// The router as serve wires it: the server, discovery registering into it, its handler.
	cfg := server.DefaultConfig()
	cfg.PDDisaggregation, cfg.ServiceDiscovery, cfg.Kubeconfig = true, true, kubeconfig
	cfg.PrefillSelector = []string{"app=sglang-prefill"}
	cfg.DecodeSelector = []string{"app=sglang-decode"}
	cfg.ServiceDiscoveryPort = port
	require.NoError(t, cfg.Validate())
	logs := &lockedBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	cfg.Seed = new(int64(1))
	srv, err := server.New(server.Options{Config: cfg, Logger: logger})
	require.NoError(t, err)
	sctx, stopServe := context.WithCancel(ctx)
	defer stopServe()
	require.NoError(t, srv.Start(sctx))
	stopDiscovery, err := Start(sctx, settings(cfg), srv, logger)
	require.NoError(t, err)
	hs := httptest.NewServer(srv.Handler())
	defer func() { hs.Close(); stopServe(); stopDiscovery(); srv.Wait() }()
	base := hs.URL

	workers := func() []string {
		resp, err := http.Get(base + "/workers")
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var out struct {
			Workers []struct {
				URL  string `json:"url"`
				Type string `json:"worker_type"`
			} `json:"workers"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		var s []string
		for _, w := range out.Workers {
			s = append(s, w.Type+" "+w.URL)
		}
		return s
	}
	waitFor := func(msg string, want ...string) {
		t.Helper()
		assert.Eventually(t, func() bool { return assert.ObjectsAreEqual(want, workers()) || (len(want) == 0 && len(workers()) == 0) },
			30*time.Second, 20*time.Millisecond, msg)
		if t.Failed() {
			t.Fatalf("%s: /workers = %v, want %v", msg, workers(), want)
		}
	}

	mkPod := func(name, ip string, labels, ann map[string]string) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: ann},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "pdrouter:test"}}}}
		pod, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
		// The kubelet's part: the pod runs, is ready and has an IP.
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		_, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	pURL := "http://" + net.JoinHostPort("127.0.0.2", strconv.Itoa(port))
	dURL := "http://" + net.JoinHostPort("127.0.0.3", strconv.Itoa(port))
	mkPod("prefill-0", "127.0.0.2", map[string]string{"app": "sglang-prefill"},
		map[string]string{"sglang.ai/bootstrap-port": strconv.Itoa(prefill.BootstrapPort())})
	mkPod("decode-0", "127.0.0.3", map[string]string{"app": "sglang-decode"}, nil)
	waitFor("both pods become workers", "prefill "+pURL, "decode "+dURL)

	resp, err := http.Post(base+"/generate", "application/json", strings.NewReader(`{"text":"hello","sampling_params":{"max_new_tokens":4}}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))

	// Relabelled away (the API server's selector watch reports it gone), then deleted.
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, "decode-0", metav1.GetOptions{})
	require.NoError(t, err)
	pod.Labels = map[string]string{"app": "elsewhere"}
	_, err = cs.CoreV1().Pods(ns).Update(ctx, pod, metav1.UpdateOptions{})
	require.NoError(t, err)
	waitFor("a relabelled pod is removed", "prefill "+pURL)
	zero := int64(0)
	require.NoError(t, cs.CoreV1().Pods(ns).Delete(ctx, "prefill-0", metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	waitFor("a deleted pod is removed")

	assert.Contains(t, logs.String(), `namespace=pd`, "without cluster-wide list rights, discovery watches its own namespace")
}
