# opencode-sandbox runner base image with a Docker engine inside the sandbox. The engine
# needs a privileged sandbox; `opencode-sandbox-start-docker` (as root) starts it.
FROM opencode-sandbox/runner-base:latest

USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      docker.io docker-cli containerd runc iptables kmod fuse-overlayfs \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
 && usermod --append --groups docker dev

COPY opencode-sandbox-start-docker /usr/local/bin/opencode-sandbox-start-docker
RUN chmod 0755 /usr/local/bin/opencode-sandbox-start-docker

LABEL org.opencode-sandbox.dind="true"
USER dev
