# Sourced by docker/build-images.sh and docker/fresh-machine.sh: a Debian root filesystem made from
# Debian's packages with mmdebstrap and streamed into `docker import`, so no registry is needed.
# The caller sets SUITE, REBUILD_BASE (non-empty: rebuild an image that exists) and ROOTFS_ENV (the
# image's environment, NAME=value each; PATH is always set).

mirrors=("deb http://deb.debian.org/debian $SUITE main"
         "deb http://deb.debian.org/debian $SUITE-updates main"
         "deb http://deb.debian.org/debian-security $SUITE-security main")
# Man pages, docs and locales are left out; openjdk's post-install needs the man1 directory anyway.
slim=(--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*'
      --dpkgopt='path-include=/usr/share/locale/locale.alias' --dpkgopt='path-exclude=/usr/share/doc/*'
      --dpkgopt='path-include=/usr/share/doc/*/copyright' --essential-hook='mkdir -p "$1/usr/share/man/man1"')

import_rootfs() {  # IMAGE PACKAGES [extra mmdebstrap options...]
    local image=$1 packages=$2 changes=() variable; shift 2
    if [ -z "$REBUILD_BASE" ] && docker image inspect "$image" >/dev/null 2>&1; then
        echo "== $image exists (--rebuild-base rebuilds it)"; return
    fi
    for variable in "${ROOTFS_ENV[@]}" PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin; do
        changes+=(-c "ENV $variable")
    done
    echo "== $image: mmdebstrap $SUITE minbase + $packages"
    nice -n 10 mmdebstrap --mode=root --variant=minbase --format=tar --include="$packages" \
        "${slim[@]}" "$@" "$SUITE" - "${mirrors[@]}" \
    | docker import "${changes[@]}" -c 'CMD ["/bin/bash"]' -m "mmdebstrap $SUITE minbase + $packages" - "$image"
}
