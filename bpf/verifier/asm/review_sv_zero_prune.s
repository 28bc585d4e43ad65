# expect: reject uninit-stack
# env: xdp
# kernel: skip the privileged kernel reads uninitialised stack bytes (rdx refuses them, docs/verifier.md)
# review attack: the zero claim across a join: fp-16 is 0 on one path, 1 on the other; the
# variable-offset read after the join gates an uninitialised read.
stdw [%r10-8], 0
mov %r2, 0
stxdw [%r10-16], %r2
call 7
mov %r6, %r0
call 7
and %r0, 8
jeq %r6, 0, join
mov %r2, 1
stxdw [%r10-16], %r2
join:
mov %r1, %r10
add %r1, -16
add %r1, %r0
ldxdw %r0, [%r1+0]
jeq %r0, 0, out
ldxdw %r0, [%r10-64]
out:
exit
