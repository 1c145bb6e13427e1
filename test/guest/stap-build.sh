#!/bin/sh
# In a chroot of a guest's root on the host (scripts/guest.sh chroot NAME),
# compiles SystemTap scripts into kernel modules for that root's kernel,
# which the guest then loads with staprun: natively about 10 s a module,
# under the guest's TCG about 6 minutes.
#   sh test/guest/stap-build.sh OUTDIR NAME=SCRIPT[:ARG[:ARG...]]...
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
