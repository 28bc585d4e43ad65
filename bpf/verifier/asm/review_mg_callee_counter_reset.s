# expect: reject infinite-loop
# env: xdp
# review finding (expected to FAIL until fixed: the verifier accepts it): the cycle is the
# caller's loop `top: call f; ja top`, which has no may_goto; the only may_goto is in the callee,
# whose counter starts full on every call, so nothing ever ends the loop at run time. The verifier
# widens the caller's r6 at the callee's may_goto and then cuts the third pass there as "covered
# by an in-progress ancestor, the counter bounds it".
mov %r6, 0
top:
add %r6, 1
call local f
ja top
f:
may_goto out
out:
mov %r0, 0
exit
