#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the Go module proxy into DIR, once (make test-k8s):
# k8s.io/kubernetes with its staging modules pinned to the matching v0.x release, since its
# go.mod names them v0.0.0 and replaces them with ./staging, which a module build cannot see.
set -euo pipefail
out=${1:?usage: scripts/k8s-testenv.sh DIR}
K8S=v1.34.1 STAGING=v0.34.1 ETCD=v3.6.4
if [[ -x $out/kube-apiserver && -x $out/etcd ]]; then exit 0; fi
GO=${GO:-go}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
printf 'module k8stestenv\n\ngo 1.26\n' > go.mod
modfile=$($GO mod download -json "k8s.io/kubernetes@$K8S" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
{
	printf 'module k8stestenv\n\ngo 1.26\n\nreplace (\n'
	awk -v v="$STAGING" '$2 == "v0.0.0" && $1 ~ /^k8s\.io\// { print "\t" $1 " => " $1 " " v }' "$modfile" | sort -u
	printf ')\n'
} > go.mod
printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "go.etcd.io/etcd/server/v3"\n\t_ "k8s.io/kubernetes/cmd/kube-apiserver"\n)\n' > tools.go
echo "building kube-apiserver $K8S and etcd $ETCD into $out (a few minutes, once)" >&2
GOFLAGS=-mod=mod $GO get "k8s.io/kubernetes/cmd/kube-apiserver@$K8S" "go.etcd.io/etcd/server/v3@$ETCD"
mkdir -p "$out"
$GO build -o "$out/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
$GO build -o "$out/etcd.tmp" go.etcd.io/etcd/server/v3
mv "$out/kube-apiserver.tmp" "$out/kube-apiserver"
mv "$out/etcd.tmp" "$out/etcd"
