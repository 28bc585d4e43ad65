# expect: reject helper-arg
# env: xdp
# map: jmp prog_array 4 4 4
stw [%r10-4], 0
mov %r2, %r10
add %r2, -4
lddw %r1, map:jmp
call 3
mov %r0, 2
exit
