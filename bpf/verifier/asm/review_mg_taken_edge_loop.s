# expect: reject infinite-loop
# env: xdp
# review finding (expected to FAIL until fixed: the verifier accepts it): the cycle closes through
# may_goto's TAKEN edge. The counter only stops the fall-through; once it is used up may_goto
# always jumps, to `back`, which returns to the may_goto: an endless loop at run time. The
# verifier cuts the path at the may_goto ("covered by an in-progress ancestor") whichever edge
# it came back by. The kernel counts may_goto depth on the fall-through edge only and refuses.
mov %r0, 0
top:
may_goto back
ja top
back:
ja top
