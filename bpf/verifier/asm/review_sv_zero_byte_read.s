# expect: reject uninit-stack
# env: xdp
# kernel: skip the privileged kernel reads uninitialised stack bytes (rdx refuses them, docs/verifier.md)
# review attack: 1-byte variable-offset reads: only fp-13 is nonzero; the range [-16,-9) includes it.
stdw [%r10-8], 0
stdw [%r10-16], 0
mov %r2, 0x100
stxh [%r10-14], %r2
call 7
and %r0, 7
mov %r1, %r10
add %r1, -16
add %r1, %r0
ldxb %r0, [%r1+0]
jeq %r0, 0, out
ldxdw %r0, [%r10-64]
out:
exit
