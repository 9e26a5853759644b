"""The package index relay: runs inside a container (``python3 -I -S -c <this source>``),
standard library only, and forwards TCP connections on the sealed prepare network to the
one index the operator named. Nothing else is reachable from that network.

    argv: HOST PORT EXCLUDED_SUBNET

The upstream address is resolved once, before lagtrace attaches the relay to the prepare
network under the index's own host name (afterwards the engine's DNS would answer that
name with the relay itself): it prints ``resolved <address>`` when ready. Bytes are
relayed untouched, so TLS to an https:// index is verified end to end by pip.
"""

import ipaddress
import socket
import sys
import threading

CHUNK = 65536


def resolve(host, port, excluded):
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        # IPv4 and IPv6 addresses come as text (an IPv6 one may carry a %scope).
        if ipaddress.ip_address(str(address[0]).split("%")[0]) not in excluded:
            return family, kind, proto, address
    raise OSError(f"{host} resolves to no address outside {excluded}")


def pipe(source, target):
    try:
        while data := source.recv(CHUNK):
            target.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((target, socket.SHUT_WR), (source, socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass


def serve(client, upstream):
    family, kind, proto, address = upstream
    try:
        server = socket.socket(family, kind, proto)
        server.settimeout(30)
        server.connect(address)
        server.settimeout(None)
    except OSError:
        client.close()
        return
    back = threading.Thread(target=pipe, args=(server, client), daemon=True)
    back.start()
    pipe(client, server)
    back.join()
    client.close()
    server.close()


def main():
    host, port, excluded = sys.argv[1], int(sys.argv[2]), ipaddress.ip_network(sys.argv[3])
    upstream = resolve(host, port, excluded)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", port))
    listener.listen(128)
    print(f"resolved {upstream[3][0]}", flush=True)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=serve, args=(client, upstream), daemon=True).start()


if __name__ == "__main__":
    main()
