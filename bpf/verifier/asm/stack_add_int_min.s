# expect: reject pointer-arith
# env: xdp
# The same on the stack pointer used to panic the verifier (capacity overflow).
mov %r2, %r10
lddw %r3, 0x8000000000000000
add %r2, %r3
ldxb %r0, [%r2-1]
exit
