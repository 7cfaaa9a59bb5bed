#!/bin/sh
# Boots one lab node. Runs as PID 1 of fresh PID/mount/UTS/IPC/cgroup namespaces inside the
# node's network namespace (started by cluster_lab.nodes), builds the node's root and
# hands over to /sbin/lab-init. Everything mounted here lives and dies with the namespace.
set -eu
: "${LAB_NODE:?}" "${LAB_BASE:?}" "${LAB_NODE_DIR:?}" "${LAB_MODEL_DIR:?}" "${LAB_SHARED_DIR:?}"
: "${LAB_STEPS_DIR:?}"
R="$LAB_NODE_DIR/root"

# A pure cgroup v2 host: the node gets a delegated subtree (LAB_CGROUP2_NODE, its controllers
# enabled by cluster_lab.nodes). Enter it, make the cgroup namespace there (its root is the
# node's cgroup), then move into its leaf `init`, so that the node's root cgroup holds no
# process and can hand controllers on to the cgroups slurmd makes.
if [ -n "${LAB_CGROUP2_NODE:-}" ] && [ "${LAB_CGROUP2_ENTERED:-}" != 1 ]; then
    echo $$ > "$LAB_CGROUP2_NODE/cgroup.procs"
    export LAB_CGROUP2_ENTERED=1
    exec unshare --cgroup sh "$0"
fi
if [ -n "${LAB_CGROUP2_NODE:-}" ]; then
    echo $$ > "$LAB_CGROUP2_NODE/init/cgroup.procs"
fi

mount --make-rprivate /
mount -t overlay overlay \
    -o "lowerdir=$LAB_BASE,upperdir=$LAB_NODE_DIR/upper,workdir=$LAB_NODE_DIR/work" "$R"
hostname "$LAB_NODE"

mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
# The node's memory and CPUs as its profile declares them (cluster_lab/hostview.py): the
# namespace would show this host's, as it would this host's PCI bus.
if [ -f "$LAB_NODE_DIR/hw/meminfo" ]; then
    mount --bind "$LAB_NODE_DIR/hw/meminfo" "$R/proc/meminfo"
    mount -o remount,ro,bind "$R/proc/meminfo"
fi
if [ -f "$LAB_NODE_DIR/hw/lscpu" ]; then
    mkdir -p "$R/usr/local/bin"
    [ -e "$R/usr/local/bin/lscpu" ] || : >"$R/usr/local/bin/lscpu"
    mount --bind "$LAB_NODE_DIR/hw/lscpu" "$R/usr/local/bin/lscpu"
    mount -o remount,ro,bind "$R/usr/local/bin/lscpu"
fi
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys"
# Part 2 fills sysfs-class with fake HCAs; sysfs itself takes no new files, an overlay does.
if [ -d "$LAB_NODE_DIR/sysfs-class" ]; then
    mount -t overlay overlay -o "ro,lowerdir=$LAB_NODE_DIR/sysfs-class:$R/sys/class" "$R/sys/class"
fi

# The cgroup hierarchies, seen through the cgroup namespace (root = this node's cgroup);
# slurmd will not start without them. LAB_CGROUPS: "dir:fstype:options" per line; dir "." is
# a v2 host's unified hierarchy, mounted at /sys/fs/cgroup itself as on a v2 host.
if [ -n "${LAB_CGROUP2_NODE:-}" ]; then
    mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 "$R/sys/fs/cgroup"
else
    mount -t tmpfs -o nosuid,nodev,noexec,mode=755,size=64k cgroup "$R/sys/fs/cgroup"
    printf '%s\n' "${LAB_CGROUPS:-}" | while IFS=: read -r dir fstype opts; do
        [ -n "$dir" ] || continue
        mkdir -p "$R/sys/fs/cgroup/$dir"
        mount -t "$fstype" -o "nosuid,nodev,noexec,$opts" cgroup "$R/sys/fs/cgroup/$dir"
    done
    mount -o remount,ro,bind "$R/sys/fs/cgroup" 2>/dev/null || true
fi

mount -t tmpfs -o nosuid,mode=755,size=256k dev "$R/dev"
mknod -m 666 "$R/dev/null" c 1 3
mknod -m 666 "$R/dev/zero" c 1 5
mknod -m 666 "$R/dev/full" c 1 7
mknod -m 666 "$R/dev/random" c 1 8
mknod -m 666 "$R/dev/urandom" c 1 9
mknod -m 666 "$R/dev/tty" c 5 0
mkdir -p "$R/dev/pts" "$R/dev/shm" "$R/dev/mqueue"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
mount -t tmpfs -o nosuid,nodev,mode=1777,size=64m shm "$R/dev/shm"
mount -t mqueue mqueue "$R/dev/mqueue"
ln -s /proc/self/fd "$R/dev/fd"
ln -s /proc/self/fd/0 "$R/dev/stdin"
ln -s /proc/self/fd/1 "$R/dev/stdout"
ln -s /proc/self/fd/2 "$R/dev/stderr"

mount -t tmpfs -o nosuid,nodev,mode=755,size=64m run "$R/run"
mkdir -p "$R/run/lock" "$R/run/lab-model" "$R/run/lab-steps" "$R/run/.oldroot"
mount --bind "$LAB_MODEL_DIR" "$R/run/lab-model"
mount -o remount,ro,bind "$R/run/lab-model"
# Where rank 0 of a simulated nccl-tests step tells the step's ranks on every node how they end.
mount --bind "$LAB_STEPS_DIR" "$R/run/lab-steps"
# The folder shared with the host at the same absolute path (a cluster's shared /home): the
# gate writes job scripts there and reads the outputs Slurm writes on the nodes.
mkdir -p "$R$LAB_SHARED_DIR"
mount --bind "$LAB_SHARED_DIR" "$R$LAB_SHARED_DIR"

cd "$R"
pivot_root . run/.oldroot
# From here on the node's own binaries run.
exec /bin/sh -c 'umount -l /run/.oldroot && rmdir /run/.oldroot && cd / && exec /sbin/lab-init'
