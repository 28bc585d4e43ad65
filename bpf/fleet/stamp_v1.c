/* Fleet test extension, version 1: stamps 1 into the request (out = out * 10 + 1, so a
 * request that crossed a chain of hops carries one digit per hop), counts requests in
 * `hits`, returns 1. */
#include "stamp.h"

SEC("rdx/on_request")
int stamp_v1(struct ctx *c)
{
	count_request();
	c->out = c->out * 10 + 1;
	return 1;
}
