#!/usr/bin/python3
"""A bounded AMQP load on a RabbitMQ broker on 127.0.0.1, for the suites
that trace one (dtrace_rabbitmq_SUITE): declares a queue, publishes COUNT
messages of SIZE bytes, consumes them all, and prints
"published COUNT consumed COUNT". Gives up after 120 s. Debian's
python3-pika; user guest (allowed from loopback only).

    amqp.py PORT COUNT SIZE [QUEUE]
"""
import sys
import time

import pika


def main():
    port, count, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    queue = sys.argv[4] if len(sys.argv) > 4 else "dtrace_suite"
    deadline = time.monotonic() + 120
    params = pika.ConnectionParameters(host="127.0.0.1", port=port, heartbeat=0,
                                       blocked_connection_timeout=60)
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.queue_declare(queue=queue, auto_delete=True)
    body = b"x" * size
    for _ in range(count):
        ch.basic_publish(exchange="", routing_key=queue, body=body)
    consumed = 0
    for method, _props, _body in ch.consume(queue, inactivity_timeout=1):
        if method is not None:
            ch.basic_ack(method.delivery_tag)
            consumed += 1
        if consumed == count or time.monotonic() > deadline:
            break
    ch.cancel()
    conn.close()
    print("published %d consumed %d" % (count, consumed), flush=True)
    return 0 if consumed == count else 1


if __name__ == "__main__":
    sys.exit(main())
