# expect: reject uninit-stack
# env: xdp
# kernel: skip the privileged kernel reads uninitialised stack bytes (rdx refuses them, docs/verifier.md)
# review attack: 32-bit index sign-extended: w0 & 0x80000008 then sign-extend via lsh/arsh
call 7
and32 %r0, 8
lsh %r0, 60
arsh %r0, 60
mov %r1, %r10
add %r1, -8
add %r1, %r0
stdw [%r10-8], 0
ldxb %r0, [%r1+0]
exit
