# pinned-build.sh is sourced by the scripts that build one pinned Go binary into the
# cache (build-etcd.sh, build-flannel.sh, build-helm.sh, build-kwok.sh, build-promtool.sh): the reuse
# of a binary already built, and the scratch directory it is built in. Needs
# versions.sh sourced first.

say() { printf 'setup: %s\n' "$*"; }

# pinned_build NAME VERSION BIN_DIR DURATION BUILD... reuses BIN_DIR/NAME when it is
# built; otherwise it runs the command BUILD... with GOBIN set to a scratch directory
# in BIN_DIR, where the command leaves the binary NAME (as `go install` does), and
# moves the binary into place, so an interrupted build never leaves a half-written
# binary in the cache. DURATION is how long the first build takes, for the log.
pinned_build() {
	local name=$1 version=$2 bin_dir=$3 duration=$4
	shift 4
	if [ -x "$bin_dir/$name" ]; then
		say "$name $version: cached in $bin_dir"
		return 0
	fi
	say "building $name $version from the Go module proxy into $bin_dir ($duration the first time)"
	mkdir -p "$bin_dir"
	# Global, not local: the EXIT trap runs after this function has returned.
	pinned_build_scratch=$(mktemp -d "$bin_dir/.build.XXXXXX")
	trap 'rm -rf "$pinned_build_scratch"' EXIT
	GOBIN="$pinned_build_scratch" "$@"
	mv "$pinned_build_scratch/$name" "$bin_dir/$name"
	say "$name $version: built $bin_dir/$name"
}

# wrapper_module NAME writes, in the current directory, the go.mod of a throwaway module
# myelin.local/NAME: a tool whose own go.mod has replace or exclude directives is built
# through it (`go get` the pinned module, then `go build` its main package), since a
# dependency's directives do not apply.
wrapper_module() {
	cat >go.mod <<MOD
module myelin.local/$1

go $GO_MIN
MOD
}
