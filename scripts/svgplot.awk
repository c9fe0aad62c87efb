# Line chart as SVG, in plain POSIX awk (works with mawk and gawk; no python).
#
#   awk -f scripts/svgplot.awk -v title='tps, TPC-B' -v xlabel=clients \
#       -v ylabel=tps -v xscale=log2 data.tsv > chart.svg
#
# Input: one point per line, tab separated: SERIES <TAB> X <TAB> Y
# (lines starting with # and lines with fewer than 3 fields are ignored).
# Series are drawn in the order they first appear: a polyline with point
# markers each, and a legend. The y axis starts at 0 and gets about five
# labelled ticks at "nice" steps (1, 2, 2.5, 5 x 10^k; k/M suffixes for large
# values).
#
# Variables (-v):
#   title, subtitle, xlabel, ylabel   text (XML special characters are escaped)
#   xscale   log2   = x values placed by log2(x), each distinct x labelled
#                     (1, 2, 4, ..., 32 come out evenly spaced); needs x > 0,
#                     falls back to linear otherwise
#            linear = (default) numeric axis with nice ticks
#   width, height   pixels (default 720 x 420)

function esc(s) {
    gsub(/&/, "\\&amp;", s); gsub(/</, "\\&lt;", s); gsub(/>/, "\\&gt;", s)
    gsub(/"/, "\\&quot;", s)
    return s
}

function floor_(v,   i) { i = int(v); return (i > v) ? i - 1 : i }
function ceil_(v,   i) { i = int(v); return (i < v) ? i + 1 : i }

# Smallest 1/2/2.5/5 x 10^k step that is >= v.
function nicestep(v,   e, f) {
    if (v <= 0) return 1
    e = exp(log(10) * floor_(log(v) / log(10) + 1e-9))
    f = v / e
    if (f <= 1.000001) return e
    if (f <= 2.000001) return 2 * e
    if (f <= 2.500001) return 2.5 * e
    if (f <= 5.000001) return 5 * e
    return 10 * e
}

# Tick label for value v of an axis whose ticks are `step` apart up to `top`.
function ticklabel(v, step, top) {
    if (v == 0) return "0"
    if (top >= 1e6 && step >= 1e5) return sprintf("%gM", v / 1e6)
    if (top >= 1e4 && step >= 1e3) return sprintf("%gk", v / 1e3)
    return sprintf("%g", v)
}

function xmap(v) {
    if (uselog) v = log(v) / log(2)
    return pl + (v - xlo) / (xhi - xlo) * pw
}
function ymap(v) { return pt + ph - (v - ylo) / (yhi - ylo) * ph }

function marker(k, x, y,   c, r) {
    c = color[(k - 1) % ncolor + 1]
    r = 4
    if ((k - 1) % 4 == 0)
        printf "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%d\" fill=\"%s\"/>\n", x, y, r, c
    else if ((k - 1) % 4 == 1)
        printf "<rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n", x - r, y - r, 2 * r, 2 * r, c
    else if ((k - 1) % 4 == 2)
        printf "<polygon points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\" fill=\"%s\"/>\n", x, y - r - 1, x - r - 1, y + r, x + r + 1, y + r, c
    else
        printf "<polygon points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f\" fill=\"%s\"/>\n", x, y - r - 1, x + r + 1, y, x, y + r + 1, x - r - 1, y, c
}

BEGIN {
    FS = "\t"
    if (width == "") width = 720
    if (height == "") height = 420
    if (xscale == "") xscale = "linear"
    ncolor = split("#1f77b4 #ff7f0e #2ca02c #d62728 #9467bd #8c564b", color, " ")
    ns = 0; nx = 0; npts = 0
}

/^#/ || NF < 3 { next }

{
    s = $1; x = $2 + 0; y = $3 + 0
    if (!(s in sidx)) { ns++; sidx[s] = ns; sname[ns] = s; np[ns] = 0 }
    k = sidx[s]
    np[k]++; px[k, np[k]] = x; py[k, np[k]] = y
    if (!(x in xseen)) { xseen[x] = 1; nx++; xs[nx] = x }
    if (npts == 0 || x < xmin) xmin = x
    if (npts == 0 || x > xmax) xmax = x
    if (npts == 0 || y > ymax) ymax = y
    if (npts == 0 || y < ymin) ymin = y
    npts++
}

END {
    # plot area
    pl = 80; pr = 150; pt = (subtitle != "") ? 62 : 48; pb = 56
    pw = width - pl - pr; ph = height - pt - pb

    printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n", width, height, width, height
    printf "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n", width, height
    printf "<text x=\"%.1f\" y=\"24\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">%s</text>\n", pl + pw / 2, esc(title)
    if (subtitle != "")
        printf "<text x=\"%.1f\" y=\"42\" text-anchor=\"middle\" font-size=\"11\" fill=\"#555\">%s</text>\n", pl + pw / 2, esc(subtitle)

    if (npts == 0) {
        printf "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">no data</text>\n", pl + pw / 2, pt + ph / 2
        print "</svg>"
        exit 0
    }

    # sort the distinct x values and each series' points by x (insertion sort)
    for (i = 2; i <= nx; i++) {
        v = xs[i]; j = i - 1
        while (j >= 1 && xs[j] > v) { xs[j + 1] = xs[j]; j-- }
        xs[j + 1] = v
    }
    for (k = 1; k <= ns; k++)
        for (i = 2; i <= np[k]; i++) {
            v = px[k, i]; w = py[k, i]; j = i - 1
            while (j >= 1 && px[k, j] > v) { px[k, j + 1] = px[k, j]; py[k, j + 1] = py[k, j]; j-- }
            px[k, j + 1] = v; py[k, j + 1] = w
        }

    # x axis
    uselog = (xscale == "log2" && xmin > 0)
    if (uselog) {
        xlo = log(xmin) / log(2); xhi = log(xmax) / log(2)
        if (xhi - xlo < 1e-9) { xlo -= 1; xhi += 1 }
        # a little room so the first and last points sit off the axes
        pad = (xhi - xlo) * 0.04; xlo -= pad; xhi += pad
        nxt = nx
        for (i = 1; i <= nx; i++) xt[i] = xs[i]
        xstep = 1; xtop = xmax
    } else {
        xstep = nicestep((xmax - xmin) / 6)
        xlo = floor_(xmin / xstep + 1e-9) * xstep
        xhi = ceil_(xmax / xstep - 1e-9) * xstep
        if (xhi - xlo < 1e-9) { xlo -= xstep; xhi += xstep }
        nxt = 0
        for (i = 0; xlo + i * xstep <= xhi + xstep * 1e-6; i++) xt[++nxt] = xlo + i * xstep
        xtop = (xhi > -xlo) ? xhi : -xlo
    }

    # y axis: from 0 (or below, for negative data) with about 5 ticks
    ylo = 0
    if (ymin < 0) { ystep = nicestep((ymax > 0 ? ymax - ymin : -ymin) / 5); ylo = floor_(ymin / ystep + 1e-9) * ystep }
    else ystep = nicestep(ymax / 5)
    if (ymax <= 0) yhi = ystep
    else yhi = ceil_(ymax / ystep - 1e-9) * ystep
    if (yhi - ylo < 1e-12) yhi = ylo + ystep
    ytop = (yhi > -ylo) ? yhi : -ylo

    # grid and y ticks
    for (i = 0; ylo + i * ystep <= yhi + ystep * 1e-6; i++) {
        v = ylo + i * ystep; y = ymap(v)
        printf "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", pl, y, pl + pw, y
        printf "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"black\"/>\n", pl - 5, y, pl, y
        printf "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", pl - 8, y + 4, ticklabel(v, ystep, ytop)
    }
    # x ticks
    for (i = 1; i <= nxt; i++) {
        x = xmap(xt[i])
        printf "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#f0f0f0\"/>\n", x, pt, x, pt + ph
        printf "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"black\"/>\n", x, pt + ph, x, pt + ph + 5
        printf "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", x, pt + ph + 19, ticklabel(xt[i], xstep, xtop)
    }
    # axes
    printf "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", pl, pt + ph, pl + pw, pt + ph
    printf "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", pl, pt, pl, pt + ph
    # axis labels
    printf "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"13\">%s</text>\n", pl + pw / 2, pt + ph + 42, esc(xlabel)
    printf "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 18 %.1f)\">%s</text>\n", pt + ph / 2, pt + ph / 2, esc(ylabel)

    # series
    for (k = 1; k <= ns; k++) {
        c = color[(k - 1) % ncolor + 1]
        pts = ""
        for (i = 1; i <= np[k]; i++)
            pts = pts sprintf("%s%.1f,%.1f", (i > 1 ? " " : ""), xmap(px[k, i]), ymap(py[k, i]))
        if (np[k] > 1)
            printf "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"/>\n", pts, c
        for (i = 1; i <= np[k]; i++) marker(k, xmap(px[k, i]), ymap(py[k, i]))
    }

    # legend
    lx = pl + pw + 20
    for (k = 1; k <= ns; k++) {
        ly = pt + 10 + (k - 1) * 22
        c = color[(k - 1) % ncolor + 1]
        printf "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>\n", lx, ly, lx + 28, ly, c
        marker(k, lx + 14, ly)
        printf "<text x=\"%d\" y=\"%d\">%s</text>\n", lx + 36, ly + 4, esc(sname[k])
    }
    print "</svg>"
}
