# expect: reject pointer-arith
# env: xdp
mov %r2, %r10
add32 %r2, 4
mov %r0, 0
exit
