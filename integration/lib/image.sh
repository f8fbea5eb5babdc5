# shellcheck shell=bash
# Builds small OCI image archives from the host's static busybox (Debian busybox-static), so that no
# test needs an image registry. Source after common.sh.

IT_BUSYBOX=${IT_BUSYBOX:-/bin/busybox}
# Local names the images are imported under. The pause name is the containerd sandbox_image; it must
# not be a name critest pulls and removes (registry.k8s.io/pause:3.9 is one).
IT_PAUSE_IMAGE=localhost/numa-shim-it/pause:1.0
IT_BUSYBOX_IMAGE=localhost/numa-shim-it/busybox:1.0
IT_WEB_IMAGE=localhost/numa-shim-it/httpd:1.0
export IT_PAUSE_IMAGE IT_BUSYBOX_IMAGE IT_WEB_IMAGE

# _it_blob DIR FILE: moves FILE into DIR/blobs/sha256 and prints its "sha256:<hex> <size>".
_it_blob() {
    local dir=$1 file=$2 hex size
    hex=$(sha256sum "$file" | cut -d' ' -f1)
    size=$(stat -c %s "$file")
    mv "$file" "$dir/blobs/sha256/$hex"
    printf 'sha256:%s %s\n' "$hex" "$size"
}

# _it_rootfs DIR: lays out a minimal busybox root file system in DIR. Applets are hard links (as in
# the upstream busybox image, so masking /bin/ls masks only ls); Debian's busybox lacks pgrep and
# ipcs, which critest runs, so small shell versions stand in for them.
_it_rootfs() {
    local root=$1 applet
    mkdir -p "$root"/{bin,etc,tmp,proc,sys,dev,www,root}
    chmod 1777 "$root/tmp"
    cp "$IT_BUSYBOX" "$root/bin/busybox"
    for applet in $("$IT_BUSYBOX" --list); do
        [[ $applet == busybox || $applet == *'['* ]] && continue
        ln "$root/bin/busybox" "$root/bin/$applet"
    done
    cat >"$root/bin/pgrep" <<'EOS'
#!/bin/sh
# pgrep PATTERN: pids whose command line matches PATTERN (not this script's own).
found=1
for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [ "$pid" = "$$" ] && continue
    cmd=$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null) || continue
    case $cmd in *pgrep*) continue ;; esac
    if echo "$cmd" | grep -qE "$1"; then echo "$pid"; found=0; fi
done
exit $found
EOS
    cat >"$root/bin/ipcs" <<'EOS'
#!/bin/sh
# ipcs -m: the shared memory segments of this IPC namespace (key, shmid, owner uid, perms, bytes).
echo "------ Shared Memory Segments --------"
echo "key        shmid      owner      perms      bytes"
tail -n +2 /proc/sysvipc/shm | while read -r key shmid perms size _ _ _ uid _; do
    echo "$key $shmid $uid $perms $size"
done
EOS
    # The pod's infra process: a small static C program that exits on SIGTERM/SIGINT and reaps
    # orphans. CRI-O stops an infra container with SIGTERM and waits for the request's deadline
    # before SIGKILL, and PID 1 of a PID namespace only receives signals it has a handler for, so
    # it installs the handler before anything else (a shell's `trap` came too late when the
    # stop followed the start closely). Not `sleep`: critest greps for its own sleep processes.
    cat >"$root/pause.c" <<'EOC'
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(void) {
    struct sigaction term = {.sa_handler = stop}, child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
    sigaction(SIGTERM, &term, NULL);
    sigaction(SIGINT, &term, NULL);
    sigaction(SIGCHLD, &child, NULL);
    for (;;) pause();
}
EOC
    gcc -std=c99 -D_POSIX_C_SOURCE=200809L -Os -Wall -Werror -static -o "$root/bin/pause" "$root/pause.c"
    strip -s "$root/bin/pause"
    rm "$root/pause.c"
    chmod 755 "$root/bin/pgrep" "$root/bin/ipcs" "$root/bin/pause"
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
    printf 'numa-shim-it web server\n' >"$root/www/index.html"
}

# it_build_image OUT.tar NAME CMD_JSON: writes an OCI image layout archive of the busybox rootfs,
# tagged NAME, whose default command is CMD_JSON (a JSON array).
it_build_image() {
    local out=$1 name=$2 cmd=$3 tmp layer config manifest
    tmp=$(mktemp -d)
    mkdir -p "$tmp/oci/blobs/sha256" "$tmp/rootfs"
    _it_rootfs "$tmp/rootfs"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$tmp/rootfs" -cf "$tmp/layer.tar" .
    layer=$(_it_blob "$tmp/oci" "$tmp/layer.tar")
    cat >"$tmp/config.json" <<EOF
{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"],"Cmd":$cmd,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["${layer% *}"]},"history":[{"created_by":"numa-shim integration/lib/image.sh"}]}
EOF
    config=$(_it_blob "$tmp/oci" "$tmp/config.json")
    cat >"$tmp/manifest.json" <<EOF
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"${config% *}","size":${config#* }},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"${layer% *}","size":${layer#* }}]}
EOF
    manifest=$(_it_blob "$tmp/oci" "$tmp/manifest.json")
    printf '{"imageLayoutVersion":"1.0.0"}\n' >"$tmp/oci/oci-layout"
    cat >"$tmp/oci/index.json" <<EOF
{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"${manifest% *}","size":${manifest#* },"annotations":{"io.containerd.image.name":"$name","org.opencontainers.image.ref.name":"${name##*:}"}}]}
EOF
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$tmp/oci" -cf "$out" .
    rm -rf "$tmp"
}

# it_build_images: builds the pause, busybox and web server image archives (once, cached under
# IT_WORK/images, rebuilt when the host's busybox or this file changes) and prints their folder.
it_build_images() {
    local dir=$IT_WORK/images
    mkdir -p "$dir"
    if [[ ! -s $dir/httpd.tar || $dir/pause.tar -ot $IT_BUSYBOX || $dir/pause.tar -ot ${BASH_SOURCE[0]} ]]; then
        it_build_image "$dir/pause.tar" "$IT_PAUSE_IMAGE" '["/bin/pause"]'
        it_build_image "$dir/busybox.tar" "$IT_BUSYBOX_IMAGE" '["/bin/sh"]'
        it_build_image "$dir/httpd.tar" "$IT_WEB_IMAGE" '["/bin/httpd","-f","-p","80","-h","/www"]'
    fi
    printf '%s\n' "$dir"
}

# it_import_images SOCKET: imports the images into the k8s.io namespace of the containerd
# listening on SOCKET.
it_import_images() {
    local sock=$1 dir f
    dir=$(it_build_images)
    for f in pause busybox httpd; do
        ctr -a "$sock" -n k8s.io images import "$dir/$f.tar" >/dev/null
    done
}
