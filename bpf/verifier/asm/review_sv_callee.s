# expect: reject pointer-leak
# env: xdp
# kernel: skip the privileged kernel lets a program read pointer bytes as a number (rdx refuses the leak)
# review attack: the callee reads its caller's frame at a variable offset covering a spilled pointer.
stdw [%r10-8], 0
stxdw [%r10-16], %r10
mov %r1, %r10
add %r1, -16
call local f
exit
f:
mov %r6, %r1
call 7
and %r0, 8
add %r6, %r0
mov %r1, %r6
ldxdw %r0, [%r1+0]
exit
