# expect: reject uninit-stack
# env: xdp
# kernel: skip the privileged kernel reads uninitialised stack bytes (rdx refuses them, docs/verifier.md)
# review attack: a spilled constant-0 register, one byte then overwritten with 1: a variable-offset
# read over it must not be "known zero" (it gates an uninitialised read).
mov %r2, 0
stxdw [%r10-8], %r2
stxdw [%r10-16], %r2
stb [%r10-13], 1
call 7
and %r0, 8
mov %r1, %r10
add %r1, -16
add %r1, %r0
ldxdw %r0, [%r1+0]
jeq %r0, 0, out
ldxdw %r0, [%r10-64]
out:
exit
