# expect: reject uninit-stack
# env: xdp
# kernel: skip the privileged kernel reads uninitialised stack bytes (rdx refuses them, docs/verifier.md)
# review attack: pointer spilled at fp-16, low 4 bytes overwritten by a scalar; a 4-byte
# variable-offset read may hit the 4 pointer bytes left at fp-12.
stdw [%r10-8], 0
stxdw [%r10-16], %r10
stw [%r10-16], 0
call 7
and %r0, 4
mov %r1, %r10
add %r1, -16
add %r1, %r0
ldxw %r0, [%r1+0]
exit
