#!/usr/bin/env bash
# Boots Debian 12's own kernel under qemu-system-x86_64 with two NUMA nodes and runs the
# project's in-guest tests (ctest label numa_vm) from a build directory, once per layout:
#   node 0: 2 CPUs + 2 GiB            (HMAT: 100 ns, 20 GB/s)
#   node 1: no CPUs, 1 GiB, "slow"    (HMAT: 300 ns,  5 GB/s)
#   plain: node 1 is boot RAM on a CPU-less node
#   kmem:  node 1 is a soft-reserved range that dax_hmem exposes and the kmem driver onlines as
#          system RAM, the way a CXL expander or Optane in KMEM DAX mode comes up: its own
#          (slower) memory tier, and memkind's MEMKIND_DAX_KMEM finds it.
# The guest sees the host's root file system read-only over virtio-9p and the build directory
# read-write at the same paths, chroots into it and runs ctest there: the test binaries built on
# the host run unchanged. Learned from ../shared/reference/numa-vm (pitfalls noted inline).
#
# Usage: tests/numa_vm/run.sh [BUILD_DIR]     (default: build/release; must be built)
# Environment: LAYOUTS="plain kmem"  QEMU_TIMEOUT=600 (seconds per run of a guest)
#              BOOT_TIMEOUT=180 (seconds for the guest's init to start; a stalled boot is tried once more)
# Exit status 0 iff every layout booted and its tests passed. Runs as root (apt-get, qemu).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=$(realpath "${1:-build/release}")
LAYOUTS=${LAYOUTS:-plain kmem}
QEMU_TIMEOUT=${QEMU_TIMEOUT:-600}
BOOT_TIMEOUT=${BOOT_TIMEOUT:-180}
WORK=$BUILD/numa-vm
say() { echo "numa-vm: $*"; }
die() { echo "numa-vm: FAILED: $*" >&2; exit 1; }

[[ -x $BUILD/tests/numa_vm_test ]] || die "no $BUILD/tests/numa_vm_test: build first (cmake --build --preset release)"
tools/setup.sh vm
mkdir -p "$WORK/tmp"
cd "$WORK"

# --- the kernel: Debian's linux-image, only vmlinuz and the dax, virtio and 9p modules ---------
if ! ls kernel/boot/vmlinuz-* >/dev/null 2>&1; then
  pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')
  [[ -n $pkg ]] || die "apt-cache finds no linux-image package (run apt-get update)"
  say "downloading $pkg"
  apt-get download "$pkg" >/dev/null 2>&1 || die "apt-get download $pkg failed"
  rm -rf kernel && mkdir kernel
  dpkg-deb --fsys-tarfile "$pkg"_*.deb | tar -x -C kernel --wildcards './boot/vmlinuz-*' \
    './lib/modules/*/kernel/drivers/dax/*' './lib/modules/*/kernel/drivers/virtio/*' \
    './lib/modules/*/kernel/net/9p/*' './lib/modules/*/kernel/fs/9p/*' \
    './lib/modules/*/kernel/fs/netfs/*' './lib/modules/*/kernel/fs/fscache/*'
  rm -f "$pkg"_*.deb
fi
vmlinuz=$(ls kernel/boot/vmlinuz-* | head -1)
kmods=$(ls -d kernel/lib/modules/*/kernel)

# --- the initramfs: busybox, the modules, and an init that sets up the layout and chroots -----
cat > init <<'INIT'
#!/bin/sh
export PATH=/bin:/usr/bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs dev /dev
arg() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
LAYOUT=$(arg layout); BUILD=$(arg build)
echo "=== GUEST UP (layout $LAYOUT, kernel $(uname -r))"
if [ "$LAYOUT" = kmem ]; then
  # What 'daxctl reconfigure-device --mode=system-ram' does: hand the soft-reserved range to kmem.
  for m in device_dax kmem dax_hmem; do insmod /lib/modules/$m.ko; done
  for d in $(ls /sys/bus/dax/devices/); do
    [ -e /sys/bus/dax/devices/$d/driver ] && echo $d > /sys/bus/dax/devices/$d/driver/unbind
    echo $d > /sys/bus/dax/drivers/kmem/new_id
  done
  for m in /sys/devices/system/memory/memory*; do
    [ "$(cat $m/state)" = offline ] && echo online_movable > $m/state
  done
fi
for t in /sys/devices/virtual/memory_tiering/memory_tier*; do echo "$(basename $t): nodes $(cat $t/nodelist)"; done
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci netfs fscache 9pnet 9pnet_virtio 9p; do
  insmod /lib/modules/$m.ko 2>/dev/null
done
mkdir -p /host; o=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o $o,ro hostroot /host && mount -t 9p -o $o build /host$BUILD || echo "=== 9p mount FAILED"
mount -t proc proc /host/proc; mount -t sysfs sysfs /host/sys; mount -t devtmpfs dev /host/dev
mkdir -p /host/dev/shm; mount -t tmpfs shm /host/dev/shm
echo 0 > /proc/sys/kernel/numa_balancing 2>/dev/null  # on by default; it would move our pages
echo "=== ctest -L numa_vm"
chroot /host /usr/bin/env -i PATH=/usr/bin:/bin:/usr/sbin:/sbin HOME=/root TMPDIR=$BUILD/numa-vm/tmp \
  TENSORTIER_NUMA_VM_LAYOUT=$LAYOUT /bin/sh -c "cd $BUILD && ctest -L numa_vm --output-on-failure -V"
echo "=== GUEST rc=$?"
poweroff -f
INIT
chmod +x init
rm -rf rootfs && mkdir -p rootfs/bin rootfs/proc rootfs/sys rootfs/dev rootfs/lib/modules
cp /bin/busybox rootfs/bin/
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "rootfs/bin/$a"; done  # not busybox->busybox (ELOOP)
cp init rootfs/
cp "$kmods"/drivers/dax/device_dax.ko "$kmods"/drivers/dax/kmem.ko "$kmods"/drivers/dax/hmem/dax_hmem.ko rootfs/lib/modules/
for m in drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_pci_modern_dev \
         drivers/virtio/virtio_pci_legacy_dev drivers/virtio/virtio_pci fs/netfs/netfs fs/fscache/fscache \
         net/9p/9pnet net/9p/9pnet_virtio fs/9p/9p; do
  [ -f "$kmods/$m.ko" ] && cp "$kmods/$m.ko" rootfs/lib/modules/
done
(cd rootfs && find . | cpio -o -H newc --quiet | gzip -1) > init.cpio.gz

# --- boot each layout --------------------------------------------------------------------------
# TCG software emulation: a boot takes about 10 s here, and KVM (where /dev/kvm exists on this
# kind of machine) failed to start nested guests (a kvm_buf_set_msrs assertion in qemu 7.2).
accel="-accel tcg -cpu max"

# Boots one layout ($layout, kernel arguments $extra, console arguments $1) with the serial
# console in $log.raw, watching for the guest's first line: a guest not up after $BOOT_TIMEOUT s
# is stopped. Writes the cleaned console and qemu's own words to $log; 0 iff the guest came up.
boot() {
  local raw=$log.raw waited=0 pid
  : > "$raw"
  timeout "$QEMU_TIMEOUT" qemu-system-x86_64 -machine q35,hmat=on $accel -smp 2 -m 3G \
    -object memory-backend-ram,id=m0,size=2G -object memory-backend-ram,id=m1,size=1G \
    -numa node,nodeid=0,cpus=0-1,memdev=m0 -numa node,nodeid=1,memdev=m1,initiator=0 \
    -numa dist,src=0,dst=1,val=20 \
    -numa hmat-lb,initiator=0,target=0,hierarchy=memory,data-type=access-latency,latency=100 \
    -numa hmat-lb,initiator=0,target=0,hierarchy=memory,data-type=access-bandwidth,bandwidth=20G \
    -numa hmat-lb,initiator=0,target=1,hierarchy=memory,data-type=access-latency,latency=300 \
    -numa hmat-lb,initiator=0,target=1,hierarchy=memory,data-type=access-bandwidth,bandwidth=5G \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs local,path="$BUILD",mount_tag=build,security_model=none,multidevs=remap \
    -kernel "$vmlinuz" -initrd init.cpio.gz \
    -append "console=ttyS0 panic=-1 $1 layout=$layout build=$BUILD $extra" \
    -display none -monitor none -serial "file:$raw" -no-reboot -nic none </dev/null >"$raw.err" 2>&1 &
  pid=$!
  until grep -q '=== GUEST UP' "$raw"; do
    kill -0 "$pid" 2>/dev/null || break
    if ((waited >= BOOT_TIMEOUT)); then kill "$pid" 2>/dev/null; break; fi
    sleep 2
    waited=$((waited + 2))
  done
  wait "$pid" || true
  { tr -d '\r' < "$raw" | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g'; cat "$raw.err"; } > "$log"
  grep -q '=== GUEST UP' "$log"
}

rc=0
for layout in $LAYOUTS; do
  extra=""
  # kmem: node 1 (at 0x100000000: q35 puts RAM past 2 GiB above 4 GiB) marked soft-reserved;
  # the range must be 2 MiB aligned for dax_hmem.
  [ "$layout" = kmem ] && extra="memmap=1G%0x100000000-1+0xefffffff"
  log=$WORK/vm_$layout.log
  start=$SECONDS
  # A TCG boot can stall in the kernel before init runs (seen once on CI, kmem layout: nothing
  # after SeaBIOS for 600 s). A stalled boot is tried once more, with the kernel's messages on,
  # so that a second stall shows where it stopped.
  up=0
  for console in "quiet loglevel=3" "loglevel=7"; do
    if boot "$console"; then up=1; break; fi
    echo "numa-vm: [$layout] the guest did not come up (limit $BOOT_TIMEOUT s; kernel arguments: $console)" >&2
  done
  if ((!up)); then
    echo "numa-vm: [$layout] qemu could not start the guest ($accel); its output:" >&2
    tail -20 "$log" >&2
    rc=1
    continue
  fi
  if grep -q '=== GUEST rc=0' "$log" && grep -q 'tests passed' "$log"; then
    say "[$layout] PASS in $((SECONDS - start)) s ($(grep -oE '[0-9]+% tests passed.*' "$log"))"
    grep -E '\[ +(OK|SKIPPED) +\] NumaVm' "$log" | sed "s/^/numa-vm: [$layout]   /" || true
  else
    echo "numa-vm: [$layout] FAIL after $((SECONDS - start)) s; the guest's log ($log):" >&2
    sed -n '/=== GUEST UP/,$p' "$log" >&2
    rc=1
  fi
done
exit $rc
