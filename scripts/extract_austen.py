#!/usr/bin/python3
"""scripts/extract_austen.py — rebuild data/pride_and_prejudice.txt from Debian's r-cran-janeaustenr.

The package ships the novels as an R lazy-load database (data/Rdata.rdx index + Rdata.rdb blobs,
each blob a 4-byte length + zlib-compressed R XDR serialization of a character vector, one element
per line). This reads that format directly (no R needed) and writes the lines joined with "\\n".

Usage:  cd /tmp && apt-get download r-cran-janeaustenr && dpkg-deb -x r-cran-janeaustenr_*.deb jane
        /usr/bin/python3 scripts/extract_austen.py /tmp/jane [prideprejudice] > data/pride_and_prejudice.txt
Other novels: emma, mansfieldpark, northangerabbey, persuasion, sensesensibility.
"""
import bz2
import gzip
import lzma
import struct
import sys
import zlib


class RReader:
    """Just enough of R's XDR serialization for lazy-load data: vectors, pairlists, attributes."""

    def __init__(self, b):
        self.b, self.p, self.refs = b, 0, []

    def int(self):
        v = struct.unpack('>i', self.b[self.p:self.p + 4])[0]
        self.p += 4
        return v

    def raw(self, n):
        v = self.b[self.p:self.p + n]
        self.p += n
        return v

    def header(self):
        if self.raw(2) != b'X\n':
            raise ValueError('not an XDR R serialization')
        version = self.int()
        self.int(), self.int()  # writer R version, minimal reader version
        if version == 3:
            self.raw(self.int())  # native encoding name

    def item(self):
        flags = self.int()
        t = flags & 0xFF
        has_attr, has_tag = flags & (1 << 9), flags & (1 << 10)
        if t == 254:  # NILVALUE_SXP
            return None
        if t in (253, 242, 241, 250, 251, 252):  # global/empty/base env, missing arg, ...
            return ('special', t)
        if t == 255:  # REFSXP
            return self.refs[(flags >> 8) - 1]
        if t == 1:  # SYMSXP
            v = self.item()
            self.refs.append(v)
            return v
        if t in (2, 6, 239, 240):  # LISTSXP, LANGSXP, ATTRLISTSXP, ATTRLANGSXP
            self.item() if has_attr else None
            tag = self.item() if has_tag else None
            car, cdr = self.item(), self.item()
            return [(tag, car)] + (cdr if isinstance(cdr, list) else [])
        if t == 9:  # CHARSXP
            n = self.int()
            if n == -1:
                return None
            return self.raw(n).decode('utf-8' if (flags >> 12) & 8 else 'latin-1')
        if t in (10, 13):  # LGLSXP, INTSXP
            v = [self.int() for _ in range(self.int())]
        elif t == 14:  # REALSXP
            n = self.int()
            v = list(struct.unpack('>%dd' % n, self.raw(8 * n)))
        elif t in (16, 19, 20):  # STRSXP, VECSXP, EXPRSXP
            v = [self.item() for _ in range(self.int())]
        else:
            raise ValueError('unsupported R type %d at byte %d' % (t, self.p))
        attr = self.item() if has_attr else None
        return ('vec', t, v, dict(attr) if attr else {})


def unchunk(b):
    n = struct.unpack('>I', b[:4])[0]
    kind = b[4:5]
    if kind in (b'Z', b'2', b'X', b'0'):  # typed compression (R >= 2.10)
        out = {b'Z': zlib.decompress, b'2': bz2.decompress, b'X': lzma.decompress,
               b'0': lambda x: x}[kind](b[5:])
    else:
        out = zlib.decompress(b[4:])
    assert len(out) == n, 'bad chunk length'
    return out


def main():
    root = sys.argv[1]
    name = sys.argv[2] if len(sys.argv) > 2 else 'prideprejudice'
    base = root.rstrip('/') + '/usr/lib/R/site-library/janeaustenr/data/Rdata'
    rdx = open(base + '.rdx', 'rb').read()
    r = RReader(gzip.decompress(rdx) if rdx[:2] == b'\x1f\x8b' else unchunk(rdx))
    r.header()
    index = r.item()
    variables = index[2][0]
    names = variables[3]['names'][2]
    if name not in names:
        sys.exit('extract_austen: no %r in the package (have %s)' % (name, ', '.join(names)))
    off, length = variables[2][names.index(name)][2]
    with open(base + '.rdb', 'rb') as f:
        f.seek(off)
        blob = f.read(length)
    r = RReader(unchunk(blob))
    r.header()
    v = r.item()
    if v[1] != 16:
        sys.exit('extract_austen: %s is not a character vector' % name)
    lines = ['' if s is None else s for s in v[2]]
    sys.stdout.write('\n'.join(lines) + '\n')


if __name__ == '__main__':
    main()
