# expect: reject pointer-leak
# env: xdp
# map: h hash 4 8 64
# kernel: skip privileged kernel accepts pointers as scalar arguments
stw [%r10-4], 1
stdw [%r10-16], 5
lddw %r1, map:h
mov %r2, %r10
add %r2, -4
mov %r3, %r10
add %r3, -16
mov %r4, %r10
call 2
mov %r0, 0
exit
