#!/bin/sh
# Rebuilds third_party/gvisor: the packages of gVisor's netstack that emunic
# builds and tests with, at the version go.mod requires, with the patches in
# third_party/patches/gvisor applied in name order. go.mod replaces the
# module with that directory (third_party/README.md says why).
#
# Run it after changing the gVisor version in go.mod, or after importing a
# gVisor package that third_party/gvisor does not hold yet (the build then
# says "no required module provides package gvisor.dev/gvisor/...").
#
#	sh scripts/gvisor-third-party.sh
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
ver=$(go list -m -f '{{.Version}}' gvisor.dev/gvisor)
src=$(go mod download -json "gvisor.dev/gvisor@$ver" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || { echo "gvisor-third-party: gVisor $ver is not in the module cache" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
# The package list comes from 'go mod vendor' on go.mod without the
# replacement: every gVisor package emunic's packages and tests import, on
# every platform, without gVisor's own tests.
cp go.mod "$tmp/go.mod"
cp go.sum "$tmp/go.sum"
go mod edit -modfile="$tmp/go.mod" -dropreplace=gvisor.dev/gvisor
# go.sum has no gVisor lines while the module is replaced: tidy the copy
# to add them (from the module cache or the proxy).
go mod tidy -modfile="$tmp/go.mod"
go mod vendor -modfile="$tmp/go.mod" -o "$tmp/vendor"

rm -rf third_party/gvisor
mkdir -p third_party/gvisor
cp -R "$tmp/vendor/gvisor.dev/gvisor/." third_party/gvisor/
cp "$src/go.mod" third_party/gvisor/go.mod
chmod -R u+w third_party/gvisor
echo "$ver" >third_party/gvisor/VERSION
for p in third_party/patches/gvisor/*.patch; do
	[ -e "$p" ] || continue
	echo "applying $p"
	patch -s -p1 -d third_party/gvisor <"$top/$p"
done
