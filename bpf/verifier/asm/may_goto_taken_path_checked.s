# expect: reject return-value
# env: xdp
# The jump of may_goto is a path too: r0 is set only on the fall-through.
may_goto out
mov %r0, 0
out:
exit
