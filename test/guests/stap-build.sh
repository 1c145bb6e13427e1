#!/bin/sh
# In a chroot of a guest's root on the host (scripts/guest.sh chroot NAME),
# compiles SystemTap scripts into kernel modules for that root's kernel,
# which the guest then loads with staprun: natively about 10 s a module,
# under the guest's TCG about 6 minutes.
#   sh test/guests/stap-build.sh OUTDIR NAME=SCRIPT[:ARG[:ARG...]]...
# Each NAME=SCRIPT (with its command-line arguments @1, @2... separated by
# ':') becomes OUTDIR/NAME.ko; the compiler's output goes to OUTDIR/NAME.log.
# Prints "stap-build: ok NAME (S s)" or "stap-build: FAIL NAME", and exits
# non-zero when any failed.
#
# Debian 12's SystemTap 4.8 does not build its runtime against Debian 12's
# current 6.1 kernels (6.1.0-50 here): the kernel renamed the unexported
# task_work_cancel(task, func) to task_work_cancel_func and gave the old
# name another signature. When the headers declare task_work_cancel_func
# and the runtime does not know it, the runtime is changed here to look up
# and call task_work_cancel_func (what later SystemTap releases do). The
# chroot's upper layer is a tmpfs: the root's cache is not changed.
set -u
out=$1
shift
kver=$(ls /lib/modules | head -1)
rt=/usr/share/systemtap/runtime/stp_task_work.c
if grep -qs task_work_cancel_func /lib/modules/"$kver"/source/include/linux/task_work.h /usr/src/linux-headers-*/include/linux/task_work.h &&
    ! grep -q 'task_work_cancel_func' "$rt"; then
    sed -i -e 's/typeof(&task_work_cancel)/typeof(\&task_work_cancel_func)/' \
        -e 's/kallsyms_lookup_name("task_work_cancel")/kallsyms_lookup_name("task_work_cancel_func")/' "$rt"
    echo "stap-build: $rt uses task_work_cancel_func (kernel $kver)"
fi
# Debian 13's SystemTap 5.1 does not build user-space probes against
# Debian 13's 6.12 kernels: 6.12 changed the uprobe API. uprobe_register
# takes a reference-counter offset and returns the struct uprobe, and
# uprobe_unregister(inode, offset, consumer) became
# uprobe_unregister_nosync(uprobe, consumer) + uprobe_unregister_sync(),
# all three exported (so no kallsyms lookup is needed). When the headers
# declare uprobe_unregister_nosync and the runtime does not know it, the
# runtime is changed here: the instance keeps uprobe_register's result
# (offset 0 for the reference counter: SystemTap raises semaphores itself)
# and unregisters through it; an empty else-body that 6.12's warnings
# refuse gets braces. Upstream SystemTap 5.2 supports 6.12 its own way.
ui=/usr/share/systemtap/runtime/linux/uprobes-inode.c
if grep -qs uprobe_unregister_nosync /usr/src/linux-headers-*/include/linux/uprobes.h &&
    [ -f "$ui" ] && ! grep -q uprobe_unregister_nosync "$ui"; then
    perl -0pi -e 's/!defined\(STAPCONF_UPROBE_UNREGISTER_EXPORTED\)/0/g' "$ui" \
        /usr/share/systemtap/runtime/linux/runtime.h /usr/share/systemtap/runtime/transport/transport.c
    perl -0pi -e 's{(\n  struct inode \*inode;[^\n]*\n)}{$1  struct uprobe *kuprobe;           // uprobe_register result (6.12)\n}' "$ui"
    perl -0pi -e 's{ret = uprobe_register \(inst->inode, c->offset, &inst->kconsumer\);}{\{ inst->kuprobe = uprobe_register (inst->inode, c->offset, 0, &inst->kconsumer); ret = IS_ERR (inst->kuprobe) ? PTR_ERR (inst->kuprobe) : 0; \}}' "$ui"
    perl -0pi -e 's{\(void\) uprobe_unregister \(inst->inode, c->offset, &inst->kconsumer\);}{uprobe_unregister_nosync (inst->kuprobe, &inst->kconsumer); uprobe_unregister_sync ();}' "$ui"
    perl -0pi -e 's{else\n\s*; // already unlocked}{else \{ \} // already unlocked}' "$ui"
    if [ "$(grep -c 'kuprobe\|else { } // already unlocked' "$ui")" -eq 4 ]; then
        echo "stap-build: $ui uses 6.12's uprobe API (kernel $kver)"
    else
        echo "stap-build: $ui: the 6.12 uprobe port did not apply (a SystemTap this script does not know)"
    fi
fi
mkdir -p "$out"
failed=0
for spec in "$@"; do
    name=${spec%%=*}
    rest=${spec#*=}
    script=${rest%%:*}
    args=
    [ "$rest" = "$script" ] || args=$(printf '%s' "${rest#*:}" | tr ':' ' ')
    t0=$(date +%s)
    # STP_NO_OVERLOAD: under TCG every probe looks slow; the module must not
    # stop itself for "overhead". -p4: compile only.
    # shellcheck disable=SC2086 # the script's arguments, one word each
    if (cd "$out" && stap -p4 -r "$kver" -DSTP_NO_OVERLOAD -m "$name" "$script" $args) > "$out/$name.log" 2>&1; then
        echo "stap-build: ok $name ($(($(date +%s) - t0)) s)"
    else
        echo "stap-build: FAIL $name:"
        tail -n 20 "$out/$name.log"
        failed=1
    fi
done
exit $failed
