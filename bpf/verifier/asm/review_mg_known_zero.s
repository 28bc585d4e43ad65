# expect: reject uninit-stack
# env: xdp
# kernel: skip a slot whose contents change between may_goto passes is forgotten by rdx's widening (refused, less precise than the kernel)
# review attack: "all zero" claim across iterations: fp-16 becomes 1 after the first pass; a
# variable-offset read that is zero only on the first pass gates an uninitialised read.
stdw [%r10-8], 0
stdw [%r10-16], 0
loop:
may_goto done
call 7
and %r0, 8
mov %r1, %r10
add %r1, -16
add %r1, %r0
ldxdw %r0, [%r1+0]
jeq %r0, 0, ok
ldxdw %r0, [%r10-64]
ok:
stdw [%r10-16], 1
ja loop
done:
mov %r0, 0
exit
