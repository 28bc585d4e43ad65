# expect: reject pointer-leak
# env: xdp
# map: counts array 4 8 4
# kernel: skip privileged kernel allows storing pointers into maps
stw [%r10-4], 0
mov %r2, %r10
add %r2, -4
lddw %r1, map:counts
call 1
jeq %r0, 0, out
stxdw [%r0+0], %r10
out:
mov %r0, 2
exit
