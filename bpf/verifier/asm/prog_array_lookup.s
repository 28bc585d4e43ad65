# expect: reject helper-arg
# env: xdp
# map: jmp prog_array 4 4 4
# A lookup would hand the program a writable pointer to a jump word.
stw [%r10-4], 0
mov %r2, %r10
add %r2, -4
lddw %r1, map:jmp
call 1
jeq %r0, 0, out
stw [%r0+0], 64
out:
mov %r0, 2
exit
