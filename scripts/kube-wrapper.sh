# kube-wrapper.sh is sourced by build-k8s.sh and build-e2e.sh: how k8s.io/kubernetes is
# built outside its own repository. Needs versions.sh sourced first.

# kube_wrapper_gomod MODULE writes go.mod in the current directory: a wrapper module
# MODULE requiring k8s.io/kubernetes at KUBE_VERSION, with every staging module k8s.io/X
# (which k8s.io/kubernetes replaces with ./staging/... paths) pinned to its v0.Y.Z release.
kube_wrapper_gomod() {
	local staging_version="v0.${KUBE_VERSION#v1.}" modfile
	modfile=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
	{
		echo "module $1"
		echo
		echo "go $(sed -n 's/^go \([0-9.]*\).*/\1/p' "$modfile")"
		echo
		echo "require k8s.io/kubernetes $KUBE_VERSION"
		echo
		echo "replace ("
		sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging_version"'#p' "$modfile"
		echo ")"
	} >go.mod.tmp
	mv go.mod.tmp go.mod
}

# kube_ldflags prints the linker flags that stamp KUBE_VERSION into a binary, as the
# project's release build does (version reported by --version and to the apiserver).
kube_ldflags() {
	local minor=${KUBE_VERSION#v1.} pkg=k8s.io/component-base/version
	minor=${minor%%.*}
	printf '%s' "-s -w -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor" \
		" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z" \
		" -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION"
}
