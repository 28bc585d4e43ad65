# expect: reject pointer-leak
# env: xdp
# kernel: skip the privileged kernel lets a program read pointer bytes as a number (rdx refuses the leak)
# review attack: the index range differs by path: narrow (fp-8 only) where fp-16 is a number,
# wide where fp-16 holds a pointer.
stdw [%r10-8], 0
stdw [%r10-16], 0
call 7
mov %r6, %r0
call 7
jeq %r6, 0, narrow
stxdw [%r10-16], %r10
and %r0, 8
ja join
narrow:
mov %r0, 8
join:
mov %r1, %r10
add %r1, -16
add %r1, %r0
ldxdw %r0, [%r1+0]
exit
