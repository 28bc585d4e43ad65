# expect: reject helper-arg
# env: xdp
# map: counts array 4 8 4
lddw %r1, map:counts
mov %r2, 8
mov %r3, 0
call 131
mov %r0, 0
exit
