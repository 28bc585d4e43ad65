# expect: reject pointer-arith
# env: xdp
# map: counts array 4 8 4
lddw %r1, map:counts
add %r1, 8
mov %r0, 0
exit
