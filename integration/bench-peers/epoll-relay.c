/* epoll-relay: the byte floor of integration/bench-relay.sh. One thread, one epoll set: accept a
 * client on a unix socket, dial the runtime's socket for it, and copy bytes both ways with
 * read/write, parsing nothing. What any extra user-space hop costs, with nothing else in it.
 *
 * Usage: epoll-relay LISTEN_SOCKET RUNTIME_SOCKET    (runs until killed)
 * Build: gcc -O2 -Wall -Wextra -o epoll-relay epoll-relay.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define BUF (64 * 1024)

/* One direction of a connection pair: bytes read from `from`, not yet written to `to`. */
struct side {
    int from, to;
    struct side *peer; /* the opposite direction */
    size_t len, off;
    int eof, closed;
    char buf[BUF];
};

static void die(const char *what) {
    perror(what);
    exit(1);
}

static struct sockaddr_un address(const char *path) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path) {
        fprintf(stderr, "socket path too long: %s\n", path);
        exit(1);
    }
    strcpy(a.sun_path, path);
    return a;
}

static int epfd;

/* Interest of `s`'s source fd: readable while its buffer is empty and it has not ended, plus
 * writable for the peer direction's pending bytes (the same fd is the peer's destination). */
static void arm(struct side *s) {
    struct epoll_event ev = {.data.ptr = s};
    if (!s->eof && s->len == 0)
        ev.events |= EPOLLIN;
    if (s->peer->len > s->peer->off)
        ev.events |= EPOLLOUT;
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, s->from, &ev) < 0)
        die("epoll_ctl mod");
}

/* Pairs closed while handling one epoll_wait batch; freed after it, since later events of the
 * same batch may still point at them. */
static struct side *dead[128];
static int ndead;

static void close_pair(struct side *s) {
    if (s->closed)
        return;
    close(s->from);
    close(s->to);
    s->closed = s->peer->closed = 1;
    if (ndead < (int)(sizeof dead / sizeof dead[0]))
        dead[ndead++] = s;
    else
        fprintf(stderr, "epoll-relay: too many closes in one batch, leaking a pair\n");
}

/* Writes what `s` holds to its destination; 0 when done or would block, -1 on error. */
static int flush(struct side *s) {
    while (s->off < s->len) {
        ssize_t n = write(s->to, s->buf + s->off, s->len - s->off);
        if (n < 0)
            return errno == EAGAIN ? 0 : -1;
        s->off += (size_t)n;
    }
    s->len = s->off = 0;
    if (s->eof)
        shutdown(s->to, SHUT_WR);
    return 0;
}

/* Handles readiness on `s->from`: read into `s` and forward, and flush the peer's bytes. */
static void ready(struct side *s, unsigned events) {
    if (s->closed)
        return;
    if (events & EPOLLERR)
        goto fail;
    if (events & (EPOLLOUT | EPOLLHUP)) {
        if (flush(s->peer) < 0)
            goto fail;
    }
    if ((events & (EPOLLIN | EPOLLHUP)) && !s->eof && s->len == 0) {
        ssize_t n = read(s->from, s->buf, BUF);
        if (n == 0)
            s->eof = 1;
        else if (n < 0 && errno != EAGAIN)
            goto fail;
        else if (n > 0)
            s->len = (size_t)n;
        if (flush(s) < 0)
            goto fail;
    }
    if (s->eof && s->peer->eof && s->len == 0 && s->peer->len == 0) {
        close_pair(s);
        return;
    }
    arm(s);
    arm(s->peer);
    return;
fail:
    close_pair(s);
}

static void add(struct side *s) {
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = s};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, s->from, &ev) < 0)
        die("epoll_ctl add");
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s LISTEN_SOCKET RUNTIME_SOCKET\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct sockaddr_un listen_at = address(argv[1]), runtime = address(argv[2]);
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0)
        die("socket");
    unlink(argv[1]);
    if (bind(lfd, (struct sockaddr *)&listen_at, sizeof listen_at) < 0 || listen(lfd, 128) < 0)
        die("bind/listen");
    if ((epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
        die("epoll_create1");
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &lev) < 0)
        die("epoll_ctl listen");
    struct epoll_event events[64];
    for (;;) {
        int n = epoll_wait(epfd, events, 64, -1);
        if (n < 0 && errno != EINTR)
            die("epoll_wait");
        for (int i = 0; i < n; i++) {
            struct side *s = events[i].data.ptr;
            if (s != NULL) {
                ready(s, events[i].events);
                continue;
            }
            int client = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (client < 0)
                continue;
            /* A blocking connect: the runtime's socket is local and listening. */
            int up = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (up < 0 || connect(up, (struct sockaddr *)&runtime, sizeof runtime) < 0 ||
                fcntl(up, F_SETFL, O_NONBLOCK) < 0) {
                perror("runtime");
                close(client);
                if (up >= 0)
                    close(up);
                continue;
            }
            struct side *in = calloc(1, sizeof *in), *out = calloc(1, sizeof *out);
            if (!in || !out)
                die("calloc");
            *in = (struct side){.from = client, .to = up, .peer = out};
            *out = (struct side){.from = up, .to = client, .peer = in};
            add(in);
            add(out);
        }
        for (; ndead > 0; ndead--) {
            free(dead[ndead - 1]->peer);
            free(dead[ndead - 1]);
        }
    }
}
