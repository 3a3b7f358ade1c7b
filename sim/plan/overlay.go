package plan

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pdrouter/pdrouter/sim"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// Overlay says how WriteOverlay renders a winner's deployment.
type Overlay struct {
	// Base is the kustomize base of the router (deploy/k8s/base) as the overlay's
	// kustomization names it: a path relative to the overlay's directory, or a remote URL.
	Base string
	// Namespace of every object (a Namespace object is included).
	Namespace string
	// Settings is the router's settings file (`router serve --config` form).
	Settings []byte
	// Image is the SGLang image of the workers.
	Image string
}

// Overlay files WriteOverlay writes.
const (
	OverlaySettingsFile = "router-settings.yaml"
	overlayPatchFile    = "router-config.yaml"
	overlayWorkersFile  = "workers.yaml"
	overlayNSFile       = "namespace.yaml"
)

// WriteOverlay writes the winner's deployment to dir as a kustomize overlay of o.Base: the
// router reads the plan's settings file (a ConfigMap mounted at /etc/pdrouter, `--config`
// appended to the base's arguments), and SGLang prefill and decode Deployments with the
// winner's counts, parallelism and GPUs, labelled as the base's selectors pick them.
func (p *Plan) WriteOverlay(dir string, o Overlay) error {
	c := p.Winner
	if c == nil {
		return fmt.Errorf("plan: no winner to deploy")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("plan: --overlay: %w", err)
	}
	// labels are the recommended labels (name, instance, component; part-of unless sel: a
	// selector's), indented.
	labels := func(name, component, indent string, sel bool) string {
		l := fmt.Sprintf("%sapp.kubernetes.io/name: %s\n%sapp.kubernetes.io/instance: %s\n%sapp.kubernetes.io/component: %s\n",
			indent, name, indent, o.Namespace, indent, component)
		if !sel {
			l += indent + "app.kubernetes.io/part-of: pdrouter\n"
		}
		return l
	}
	kust := fmt.Sprintf(`# The deployment `+"`router sim plan`"+` chose: %s (%s), %d GPUs.
# Render with kustomize build DIR; apply with kubectl apply -k DIR.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: %s
resources:
  - %s
  - %s
  - %s
configMapGenerator:
  - name: pdrouter-settings
    files:
      - settings.yaml=%s
    options:
      labels:
%spatches:
  - path: %s
    target:
      kind: Deployment
      name: pdrouter
`, c.Shape(), p.routerLabel(c), c.GPUs(), o.Namespace, overlayNSFile, o.Base, overlayWorkersFile, OverlaySettingsFile,
		labels("pdrouter", "settings", "        ", false), overlayPatchFile)
	ns := "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + o.Namespace + "\n  labels:\n" + labels("pdrouter", "namespace", "    ", false)
	patch := `# The router reads the plan's settings (router-settings.yaml) with --config; flags in the
# base's arguments override the file.
- op: add
  path: /spec/template/spec/containers/0/args/-
  value: --config
- op: add
  path: /spec/template/spec/containers/0/args/-
  value: /etc/pdrouter/settings.yaml
- op: add
  path: /spec/template/spec/volumes
  value:
    - name: settings
      configMap:
        name: pdrouter-settings
- op: add
  path: /spec/template/spec/containers/0/volumeMounts
  value:
    - name: settings
      mountPath: /etc/pdrouter
      readOnly: true
`
	cl := c.Point.Config.Cluster
	model := modelPath(cl)
	var workers strings.Builder
	fmt.Fprintf(&workers, "# SGLang workers of the plan: %s, model %s. Add your KV transfer backend\n# (--disaggregation-transfer-backend, RDMA devices) and pin the image you run.\n", c.Shape(), model)
	for i, r := range []struct {
		role  string
		n     int
		s     Server
		args  engine.ServerArgs
		extra []string
	}{
		{"prefill", c.Prefill, c.P, roleArgs(cl, engine.RolePrefill), []string{"--disaggregation-bootstrap-port", "8998"}},
		{"decode", c.Decode, c.D, roleArgs(cl, engine.RoleDecode), nil},
	} {
		if i > 0 {
			workers.WriteString("---\n")
		}
		args := []string{"--model-path", model, "--disaggregation-mode", r.role, "--tp-size", strconv.Itoa(r.s.TP)}
		if r.s.DP > 1 {
			args = append(args, "--dp-size", strconv.Itoa(r.s.DP))
		}
		if r.s.EP > 1 {
			args = append(args, "--ep-size", strconv.Itoa(r.s.EP))
		}
		if r.s.DPAttention {
			args = append(args, "--enable-dp-attention")
		}
		args = append(args, engineFlags(r.args)...)
		args = append(args, r.extra...)
		args = append(args, "--host", "0.0.0.0", "--port", "30000")
		var argLines strings.Builder
		for _, a := range args {
			fmt.Fprintf(&argLines, "            - %q\n", a)
		}
		annotations, ports := "", "            - name: http\n              containerPort: 30000\n"
		if r.role == "prefill" {
			annotations = "      annotations:\n        sglang.ai/bootstrap-port: \"8998\"\n"
			ports += "            - name: bootstrap\n              containerPort: 8998\n"
		}
		fmt.Fprintf(&workers, `apiVersion: apps/v1
kind: Deployment
metadata:
  name: sglang-%s
  labels:
%sspec:
  replicas: %d
  selector:
    matchLabels:
%s  template:
    metadata:
      labels:
%s%s    spec:
      containers:
        - name: sglang
          image: %s
          command: ["python3", "-m", "sglang.launch_server"]
          args:
%s          ports:
%s          readinessProbe:
            httpGet:
              path: /health
              port: http
            periodSeconds: 5
          resources:
            limits:
              nvidia.com/gpu: %d
`, r.role, labels("sglang", r.role, "    ", false), r.n, labels("sglang", r.role, "      ", true),
			labels("sglang", r.role, "        ", false), annotations, o.Image, argLines.String(), ports, r.s.GPUs())
	}
	for name, body := range map[string][]byte{
		"kustomization.yaml": []byte(kust), overlayNSFile: []byte(ns), overlayPatchFile: []byte(patch),
		overlayWorkersFile: []byte(workers.String()), OverlaySettingsFile: o.Settings,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			return fmt.Errorf("plan: --overlay: %w", err)
		}
	}
	return nil
}

// modelPath is the --model-path the workers launch with: the model card's Hugging Face id
// (its first alias), or a preset's model's; "MODEL" when the plan ran on a profile file.
func modelPath(cl sim.Cluster) string {
	m, err := cl.Model()
	if cl.ModelPath == "" {
		var ok bool
		m, _, ok = engine.PresetSetup(cl.Profile)
		if !ok {
			return "MODEL"
		}
	} else if err != nil {
		return cl.ModelPath
	}
	if len(m.Aliases) > 0 {
		return m.Aliases[0]
	}
	return m.Name
}

// roleArgs are the engine arguments the plan's servers of role were given (not SGLang's
// defaults: the workers derive those themselves).
func roleArgs(cl sim.Cluster, role engine.Role) engine.ServerArgs {
	switch {
	case role == engine.RolePrefill && cl.PrefillArgs != nil:
		return *cl.PrefillArgs
	case role == engine.RoleDecode && cl.DecodeArgs != nil:
		return *cl.DecodeArgs
	}
	return cl.Args
}

// engineFlags renders the set engine arguments as SGLang's flags.
func engineFlags(a engine.ServerArgs) []string {
	var out []string
	add := func(flag string, v float64) {
		if v != 0 {
			out = append(out, flag, strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	add("--chunked-prefill-size", float64(a.ChunkedPrefillSize))
	add("--max-running-requests", float64(a.MaxRunningRequests))
	add("--max-total-tokens", float64(a.MaxTotalTokens))
	add("--page-size", float64(a.PageSize))
	add("--cuda-graph-max-bs", float64(a.CUDAGraphMaxBS))
	add("--mem-fraction-static", a.MemFractionStatic)
	add("--schedule-conservativeness", a.ScheduleConservativeness)
	return out
}
