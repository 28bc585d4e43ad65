# expect: reject helper-arg
# env: xdp
# map: jmp prog_array 4 4 4
# A program writing a program array's element would choose the jump word `bpf_tail_call`
# enters (issue: program-chosen native code). The kernel refuses it the same way.
stw [%r10-4], 0
stw [%r10-8], 64
mov %r2, %r10
add %r2, -4
mov %r3, %r10
add %r3, -8
lddw %r1, map:jmp
mov %r4, 0
call 2
mov %r0, 2
exit
