# expect: reject stack-limit
# env: xdp
# review attack: index from a 32-bit op whose 64-bit view differs (mov32 of a negative).
stdw [%r10-8], 0
call 7
mov32 %r0, %r0
and32 %r0, -8
mov %r1, %r10
add %r1, -8
sub %r1, %r0
ldxdw %r0, [%r1+0]
exit
