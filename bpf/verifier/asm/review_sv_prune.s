# expect: reject pointer-leak
# env: xdp
# kernel: skip the privileged kernel lets a program read pointer bytes as a number (rdx refuses the leak)
# review attack: one path leaves fp-16 a number, the other a spilled pointer; they join before a
# variable-offset read covering fp-16.
stdw [%r10-8], 0
stdw [%r10-16], 0
call 7
mov %r6, %r0
call 7
jeq %r6, 0, skip
stxdw [%r10-16], %r10
skip:
and %r0, 8
mov %r1, %r10
add %r1, -16
add %r1, %r0
ldxdw %r0, [%r1+0]
exit
