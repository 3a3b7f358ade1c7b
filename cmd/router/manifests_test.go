package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// decodeManifests splits a multi-document YAML file and decodes each document strictly
// (unknown fields are errors) into the k8s.io/api type of its kind.
func decodeManifests(t *testing.T, path string) []any {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	return decodeYAML(t, path, raw)
}

// decodeYAML is decodeManifests of raw, the documents of path (a file, or a rendering).
func decodeYAML(t *testing.T, path string, raw []byte) []any {
	t.Helper()
	var out []any
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")) == "" {
			continue
		}
		js, err := yaml.YAMLToJSON([]byte(doc))
		require.NoError(t, err, "%s document %d", path, i)
		var meta struct{ Kind string }
		require.NoError(t, json.Unmarshal(js, &meta))
		var obj any
		switch meta.Kind {
		case "Job":
			obj = &batchv1.Job{}
		case "ConfigMap":
			obj = &corev1.ConfigMap{}
		case "PersistentVolumeClaim":
			obj = &corev1.PersistentVolumeClaim{}
		case "Deployment":
			obj = &appsv1.Deployment{}
		case "Service":
			obj = &corev1.Service{}
		case "ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "Namespace":
			obj = &corev1.Namespace{}
		case "Role":
			obj = &rbacv1.Role{}
		case "RoleBinding":
			obj = &rbacv1.RoleBinding{}
		case "ServiceMonitor":
			obj = &serviceMonitor{}
		default:
			t.Fatalf("%s document %d: kind %q has no decoder in this test", path, i, meta.Kind)
		}
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(obj), "%s document %d (%s)", path, i, meta.Kind)
		out = append(out, obj)
	}
	return out
}

// The sweep Job decodes strictly into the Kubernetes types, is an Indexed Job whose shard count
// matches its completions, and the merge Job reads every shard the Job writes.
func TestSimSweepJobManifest(t *testing.T) {
	objs := decodeManifests(t, "../../deploy/k8s/sim-sweep-job.yaml")
	require.Len(t, objs, 3)
	pvc := objs[0].(*corev1.PersistentVolumeClaim)
	sweep, merge := objs[1].(*batchv1.Job), objs[2].(*batchv1.Job)
	require.NotNil(t, sweep.Spec.CompletionMode)
	assert.Equal(t, batchv1.IndexedCompletion, *sweep.Spec.CompletionMode)
	n := int(*sweep.Spec.Completions)
	args := strings.Join(sweep.Spec.Template.Spec.Containers[0].Args, " ")
	assert.Contains(t, args, fmt.Sprintf("--shard=$(JOB_COMPLETION_INDEX)/%d", n))
	assert.Contains(t, args, "--out=/results/shard-$(JOB_COMPLETION_INDEX)")
	margs := merge.Spec.Template.Spec.Containers[0].Args
	assert.Equal(t, []string{"sim", "sweep", "--merge"}, margs[:3])
	for i := range n {
		assert.Contains(t, margs, fmt.Sprintf("/results/shard-%d", i))
	}
	for _, o := range objs {
		kind, meta := objectMeta(t, o)
		for _, l := range k8sLabels {
			assert.NotEmpty(t, meta.Labels[l], "%s %s has no %s label", kind, meta.Name, l)
		}
	}
	for _, j := range []*batchv1.Job{sweep, merge} {
		for _, l := range k8sLabels {
			assert.NotEmpty(t, j.Spec.Template.Labels[l], "%s's pods have no %s label", j.Name, l)
		}
	}
	// Applied in two steps by label: the shards (and their volume), then the merge.
	assert.Equal(t, "shards", pvc.Labels["pdrouter.io/step"])
	assert.Equal(t, "shards", sweep.Labels["pdrouter.io/step"])
	assert.Equal(t, "merge", merge.Labels["pdrouter.io/step"])
	for _, j := range []*batchv1.Job{sweep, merge} {
		vols := j.Spec.Template.Spec.Volumes
		require.Len(t, vols, 1)
		assert.Equal(t, pvc.Name, vols[0].PersistentVolumeClaim.ClaimName, "shared volume")
	}
	// The shard command line parses: the same flags as a local sweep, index 0 filled in.
	shardArgs := strings.ReplaceAll(args, "$(JOB_COMPLETION_INDEX)", "0")
	cmd := newRootCmd()
	sweepCmd, rest, err := cmd.Find(strings.Fields(shardArgs))
	require.NoError(t, err)
	require.NoError(t, sweepCmd.ParseFlags(rest))
}
