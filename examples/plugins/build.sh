#!/bin/sh
# Builds the example plugins into examples/plugins/build/, each next to its golden
# cases (X.cases.yaml), so `gatectl plugin check build/X.wasm` runs them.
#
#   examples/plugins/build.sh            # all of them
#   examples/plugins/build.sh wat go     # only some languages: wat, as, go
#
# Toolchains: wat2wasm (Debian: apt-get install -y wabt); Node.js and npm for
# AssemblyScript (this script runs `npm ci` in as/ when its node_modules is
# missing); Go 1.24 or later.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out="$here/build"
mkdir -p "$out"
for lang in ${*:-wat as go}; do
	case "$lang" in
	wat)
		wat2wasm "$here/wat/octafuse.wat" -o "$out/octafuse-wat.wasm"
		;;
	as)
		cd "$here/as"
		[ -d node_modules/assemblyscript ] || npm ci --no-audit --no-fund
		npx asc assembly/index.ts --config asconfig.json --target release --outFile "$out/octafuse-as.wasm"
		;;
	go)
		cd "$here/go"
		for p in octafuse scorer balance; do
			GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$out/$p-go.wasm" "./$p"
		done
		cp "$here/scorer.cases.yaml" "$out/scorer-go.cases.yaml"
		cp "$here/balance.cases.yaml" "$out/balance-go.cases.yaml"
		;;
	*)
		echo "build.sh: unknown language $lang (want wat, as or go)" >&2
		exit 2
		;;
	esac
	[ -f "$out/octafuse-$lang.wasm" ] && cp "$here/octafuse.cases.yaml" "$out/octafuse-$lang.cases.yaml"
	echo "built $lang"
done
