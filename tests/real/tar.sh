#!/usr/bin/env bash
# tar, gzip, xz, find, xargs and md5sum under uslab: archive a generated tree
# of 2,000 files (reproducibly: sorted names, fixed mtime and owner), compress
# it with gzip and with two-threaded xz, unpack both and checksum every file.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init tar
real_need tar gzip xz md5sum find xargs
export LC_ALL=C

tree=$REAL_TMP/tree
awk -v top="$tree" 'BEGIN {
	for (d = 0; d < 40; d++) {
		dir = sprintf("%s/d%02d/e%d", top, d, d % 3)
		system("mkdir -p " dir)
		for (f = 0; f < 50; f++) {
			path = sprintf("%s/f%03d.dat", dir, f)
			n = 20 + (d * 50 + f) * 13 % 300
			for (l = 0; l < n; l++)
				printf "%d %d %d %s\n", d, f, l * l % 9973, substr("0123456789abcdefghijklmnopqrstuvwxyz", 1 + (l * f) % 36) > path
			close(path)
		}
	}
}'
echo "generated $(find "$tree" -type f | wc -l) files, $(du -sh "$tree" | cut -f1)"
tarflags="--sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner"

run_both_sh find-md5sum "cd '$tree' && find . -type f -print0 | sort -z | xargs -0 -n 100 md5sum"
run_both_sh tar-gzip "
	set -euo pipefail
	tar $tarflags -C '$tree' -cf tree.tar . && md5sum <tree.tar
	gzip -6 -n -c tree.tar >tree.tar.gz && md5sum <tree.tar.gz
	mkdir out && tar -C out -xzf tree.tar.gz
	cd out && find . -type f -print0 | sort -z | xargs -0 md5sum | md5sum"
run_both_sh tar-xz "
	set -euo pipefail
	tar $tarflags -C '$tree' -cf - . | xz -3 -T2 -c >tree.tar.xz && md5sum <tree.tar.xz
	xz -T2 -t tree.tar.xz
	mkdir out && xz -d -T2 -c tree.tar.xz | tar -C out -xf -
	cd out && find . -type f -print0 | sort -z | xargs -0 md5sum | md5sum"
