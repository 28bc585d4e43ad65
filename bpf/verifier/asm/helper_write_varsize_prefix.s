# expect: accept
# env: socket_filter
# skb_load_bytes writes at least `umin` = 4 bytes of a variable length: those are readable.
ldxw %r4, [%r1+0]
and %r4, 3
add %r4, 4
mov %r2, 0
mov %r3, %r10
add %r3, -8
call 26
ldxw %r0, [%r10-8]
exit
