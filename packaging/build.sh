#!/usr/bin/env bash
# Builds dist/herald_VERSION_ARCH.deb and dist/herald-VERSION.ARCH.rpm with nfpm
# (packaging/nfpm.yaml). Run from anywhere; `make packages` runs it.
#
# Environment:
#   HERALD_VERSION  package version (default: derived from git describe, below)
#   GO              go command (default: go)
#   NFPM            nfpm command (default: go run of the pinned nfpm module)
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
NFPM_MODULE=github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
if [ -n "${NFPM:-}" ]; then
	read -r -a nfpm <<<"$NFPM"
else
	nfpm=("$GO" run "$NFPM_MODULE")
fi

# Version: deb and rpm need one starting with a digit, so the git tag's "v" is
# dropped and an untagged tree becomes 0.0.0+g<sha>:
#   v1.2.3 -> 1.2.3;  v1.2.3-4-gabc1234 -> 1.2.3+4.gabc1234;  abc1234 -> 0.0.0+gabc1234;
#   "-dirty" -> ".dirty";  no git -> 0.0.0~dev
version_from_git() {
	local d dirty=""
	d=$(git describe --tags --always --dirty --long --match 'v[0-9]*' 2>/dev/null) || { echo "0.0.0~dev"; return; }
	case "$d" in *-dirty) dirty=".dirty"; d=${d%-dirty} ;; esac
	if [[ "$d" =~ ^v([0-9][0-9A-Za-z.]*)-([0-9]+)-g([0-9a-f]+)$ ]]; then
		if [ "${BASH_REMATCH[2]}" = 0 ]; then
			echo "${BASH_REMATCH[1]}${dirty:++dirty}"
		else
			echo "${BASH_REMATCH[1]}+${BASH_REMATCH[2]}.g${BASH_REMATCH[3]}${dirty}"
		fi
	elif [[ "$d" =~ ^[0-9a-f]+$ ]]; then
		echo "0.0.0+g${d}${dirty}"
	else
		echo "0.0.0~dev"
	fi
}
VERSION=${HERALD_VERSION:-$(version_from_git)}
if ! [[ "$VERSION" =~ ^[0-9][0-9A-Za-z.+~]*$ ]]; then
	echo "build.sh: version \"$VERSION\" is not a valid deb/rpm version (start with a digit; only letters, digits, . + ~)" >&2
	exit 64
fi

GOARCH=$("$GO" env GOARCH)
case "$GOARCH" in
amd64) debarch=amd64 rpmarch=x86_64 ;;
arm64) debarch=arm64 rpmarch=aarch64 ;;
386) debarch=i386 rpmarch=i686 ;;
arm) debarch=armhf rpmarch=armv7hl ;;
*) debarch=$GOARCH rpmarch=$GOARCH ;;
esac

out=dist/build
rm -rf "$out"
mkdir -p "$out"
rm -f dist/herald_*.deb dist/herald-*.rpm

echo "build.sh: herald $VERSION for $GOARCH"
export CGO_ENABLED=1 # SQLite
ldflags="-s -w -X main.version=$VERSION"
"$GO" build -ldflags "$ldflags" -o "$out/heraldd" ./cmd/heraldd
"$GO" build -ldflags "$ldflags" -o "$out/herald" ./cmd/herald

# Depends: libc6 (>= X) / glibc >= X, X being the highest GLIBC_x.y symbol
# version the binaries import (cgo links them against the C library), read
# from their dynamic symbol tables rather than typed by hand.
if ! command -v objdump >/dev/null; then
	echo "build.sh: objdump not found: install binutils (it reads the glibc version the binaries need)" >&2
	exit 69
fi
HERALD_GLIBC=$(objdump -T "$out/heraldd" "$out/herald" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//' | sort -uV | tail -n 1)
if [ -z "$HERALD_GLIBC" ]; then
	echo "build.sh: the binaries import no GLIBC_ symbol version: are they linked against glibc (CGO_ENABLED=1)?" >&2
	exit 70
fi
echo "build.sh: the binaries need glibc >= $HERALD_GLIBC"

# Man pages and completion: herald's come from its command definitions.
"$out/herald" man >"$out/herald.1"
gzip -9n "$out/herald.1"
gzip -9nc packaging/heraldd.8 >"$out/heraldd.8.gz"
"$out/herald" completion bash >"$out/herald.bash-completion"

# Reproducible timestamps: the last commit's time unless the caller set one.
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s)
	export SOURCE_DATE_EPOCH
fi

export HERALD_VERSION=$VERSION HERALD_ARCH=$GOARCH HERALD_GLIBC
deb="dist/herald_${VERSION}_${debarch}.deb"
rpm="dist/herald-${VERSION}.${rpmarch}.rpm"
"${nfpm[@]}" package --config packaging/nfpm.yaml --packager deb --target "$deb"
"${nfpm[@]}" package --config packaging/nfpm.yaml --packager rpm --target "$rpm"
echo "build.sh: built $deb $rpm"
