# ingestd container image: a Release build on Debian 12, run as a non-root user.
#   docker build -t ingestd .
#   docker run -p 8080:8080 -e INGESTD_WRITE_KEY=my-key -v ingestd-data:/data ingestd
# Every `serve` flag has an INGESTD_* environment variable (see README.md); the listen
# address and data dir are set through the environment here, not through flags, so that
# `docker run -e INGESTD_LISTEN=...` can still change them (flags would win over env).

FROM debian:bookworm-slim AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        build-essential cmake pkg-config \
        libmicrohttpd-dev libgnutls28-dev libjansson-dev liblmdb-dev uuid-dev zlib1g-dev librdkafka-dev \
        libjemalloc-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
    && cmake --build /build -j"$(nproc)" --target ingestd \
    && strip /build/ingestd

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        libmicrohttpd12 libjansson4 liblmdb0 libuuid1 zlib1g librdkafka1 libjemalloc2 \
    && apt-get clean && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --home-dir /data --shell /usr/sbin/nologin ingestd \
    && mkdir -p /data && chown ingestd:ingestd /data
COPY --from=build /build/ingestd /usr/local/bin/ingestd
COPY scripts/healthcheck /usr/local/bin/ingestd-healthcheck
ENV INGESTD_LISTEN=0.0.0.0:8080 \
    INGESTD_DATA=/data
USER ingestd
VOLUME /data
EXPOSE 8080
# curl is not in the slim image: the check speaks HTTP over bash's /dev/tcp.
HEALTHCHECK --interval=15s --timeout=3s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/ingestd-healthcheck"]
ENTRYPOINT ["/usr/local/bin/ingestd"]
# The write key comes from INGESTD_WRITE_KEY (KEY[:SOURCE], comma-separated); without one
# the server exits 2 and says so.
CMD ["serve"]
