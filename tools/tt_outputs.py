"""Files the tools write, by the rule every tensortier output follows (allocator/include/tensortier/write_file.h):

  path names                 | written
  ---------------------------+--------------------------------------------------------------
  nothing, a regular file    | to a new temporary file beside it, then renamed over it (a failed
                             | write leaves a file already there as it was)
  a character device, a FIFO | in place, as a shell's `>` would (a FIFO no process reads: refused)
  a symbolic link            | refused, naming its target: no output follows a link
  anything else              | refused (a directory, a block device, a socket)

write_output raises OutputError with a line for people; nothing is left half-written.
"""
import errno
import os
import stat


class OutputError(Exception):
    pass


def _in_place(path, data, what):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ENXIO:
            raise OutputError(f"cannot write {what} to '{path}': it is a FIFO that no process reads; "
                              "start its reader first, or name a file") from None
        raise OutputError(f"cannot write {what} to '{path}': {e.strerror}") from None
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as e:
        raise OutputError(f"writing {what} to '{path}' failed: {e.strerror}") from None
    finally:
        os.close(fd)


def write_output(path, data, what="the output"):
    """Writes bytes (or str, as UTF-8) to path by the rule above."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise OutputError(f"cannot write {what} to '{path}': {e.strerror}") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise OutputError(f"cannot write {what} to '{path}': it is a symbolic link (to '{os.readlink(path)}'), "
                              "and no output follows one; name the file itself")
        if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
            return _in_place(path, data, what)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise OutputError(f"cannot write {what} to '{path}': it is {kind}; name a file")
    for attempt in range(100):
        tmp = f"{path}.{os.getpid()}.{attempt}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
            break
        except FileExistsError:
            continue
        except OSError as e:
            raise OutputError(f"cannot write {what} to '{path}': {e.strerror}; "
                              "check the directory exists and is writable") from None
    else:
        raise OutputError(f"cannot write {what} to '{path}': no free temporary name beside it")
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.rename(tmp, path)
    except OSError as e:
        if fd >= 0:
            os.close(fd)
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise OutputError(f"writing {what} to '{path}' failed: {e.strerror}; a file there is left as it was") from None


def save_figure(fig, path, what="the figure", **kwargs):
    """A matplotlib figure, rendered in memory, then written by write_output (PNG unless kwargs say)."""
    import io
    buffer = io.BytesIO()
    fig.savefig(buffer, format=kwargs.pop("format", os.path.splitext(path)[1].lstrip(".") or "png"), **kwargs)
    write_output(path, buffer.getvalue(), what)
