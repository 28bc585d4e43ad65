# expect: reject pointer-arith
# env: socket_filter
# map: globals array 4 16 1
# Constant offsets are bounded as in the kernel (|off| < 2^29), however they are reached.
lddw %r2, mapvalue:globals+0
add %r2, 0x10000000
add %r2, 0x10000000
mov %r0, 0
exit
