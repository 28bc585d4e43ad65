# expect: reject helper-arg
# env: xdp
# map: counts hash 4 8 4
mov %r2, 0
lddw %r1, map:counts
call 1
mov %r0, 0
exit
