# expect: reject uninit-stack
# env: xdp
# kernel: skip a slot whose contents change between may_goto passes is forgotten by rdx's widening (refused, less precise than the kernel)
# review attack: fp-8 holds a number on the first pass and a pointer after; read back as a
# number and returned.
stdw [%r10-8], 0
mov %r0, 0
loop:
may_goto done
ldxdw %r0, [%r10-8]
stxdw [%r10-8], %r10
ja loop
done:
exit
