# expect: reject invalid-mem-base
# env: socket_filter
# map: jmp prog_array 4 4 1
# Direct value access (how clang reaches globals) is for one-element arrays only: into a
# one-element program array it would be a store into a jump word.
lddw %r2, mapvalue:jmp+0
stw [%r2+0], 64
mov %r0, 0
exit
